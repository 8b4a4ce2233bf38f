"""numpy arrays as pydantic fields, and their msgpack extension encoding.

A tensor travels as one msgpack extension (code `TENSOR_EXT`) whose payload is a
small fixed header (dtype code, number of dimensions, each dimension as uint64)
followed by the raw little-endian bytes. The header is parsed defensively: every
inconsistency becomes a `ProtocolError` naming it.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any

import numpy as np
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .errors import ProtocolError

TENSOR_EXT = 1
MAX_DIMS = 8

# A closed table: decoding never lets the sender name an arbitrary numpy dtype
# (an object dtype would be a door to pickle).
_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(t).newbyteorder("<")
    for t in (
        "float32",
        "float64",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
    )
)
_CODE_OF = {dt.newbyteorder("="): code for code, dt in enumerate(_DTYPES)}
_HEADER = struct.Struct("<BB")


def pack_tensor(array: np.ndarray) -> bytes:
    """The extension payload of `array`: header, then little-endian bytes."""
    code = _CODE_OF.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ProtocolError(f"tensor: dtype {array.dtype} cannot be sent")
    if array.ndim > MAX_DIMS:
        raise ProtocolError(f"tensor: {array.ndim} dimensions, at most {MAX_DIMS}")
    little = array.astype(_DTYPES[code], order="C", copy=False)
    header = _HEADER.pack(code, little.ndim) + struct.pack(
        f"<{little.ndim}Q", *little.shape
    )
    return header + little.tobytes()


def unpack_tensor(payload: bytes) -> np.ndarray:
    """The array encoded by `pack_tensor`; a read-only view of `payload`."""
    if len(payload) < _HEADER.size:
        raise ProtocolError("tensor: header truncated")
    code, ndim = _HEADER.unpack_from(payload)
    if code >= len(_DTYPES):
        raise ProtocolError(f"tensor: bad dtype code {code}")
    if ndim > MAX_DIMS:
        raise ProtocolError(f"tensor: {ndim} dimensions, at most {MAX_DIMS}")
    start = _HEADER.size + 8 * ndim
    if len(payload) < start:
        raise ProtocolError("tensor: shape truncated")
    shape = struct.unpack_from(f"<{ndim}Q", payload, _HEADER.size)
    dtype = _DTYPES[code]
    expected = dtype.itemsize * int(np.prod(shape, dtype=np.float64))
    if len(payload) - start != expected:
        raise ProtocolError(
            f"tensor: shape {tuple(shape)} of {dtype.name} needs {expected:.0f} bytes,"
            f" {len(payload) - start} were sent"
        )
    return np.frombuffer(payload, dtype=dtype, offset=start).reshape(shape)


def _as_array(value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ValueError(f"expected a tensor, got {type(value).__name__}")
    return value


def _as_flat_finite(value: Any) -> np.ndarray:
    array = _as_array(value)
    if array.ndim != 1:
        raise ValueError(f"expected a flat vector, got shape {array.shape}")
    if array.dtype.kind != "f":
        raise ValueError(f"expected floating point values, got {array.dtype}")
    if not np.isfinite(array).all():
        raise ValueError("contains NaN or Inf")
    return array


def dtype_names() -> list[str]:
    """The sendable dtypes, in the order of their codes in the header."""
    return [dt.name for dt in _DTYPES]


def json_form(payload: bytes) -> dict[str, Any]:
    """A tensor extension as the JSON form of a message shows it (schema
    validation, traces): its dtype, shape and size, not its values."""
    array = unpack_tensor(payload)
    return {
        "ext": TENSOR_EXT,
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "nbytes": int(array.nbytes),
    }


class _TensorSchema:
    """Pydantic hook: validate with `check`, serialise as the array itself.

    The codec turns arrays into extension types, so the python-mode dump keeps
    them as arrays rather than lists of floats. The JSON Schema describes the
    tensor's JSON form (`json_form`).
    """

    def __init__(self, check: Any, *, flat: bool = False, matrix: bool = False) -> None:
        self.check = check
        self.flat = flat
        self.matrix = matrix

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        names = dtype_names()
        floats = [n for n in names if n.startswith("float")]
        shape: dict[str, Any] = {
            "type": "array",
            "items": {"type": "integer", "minimum": 0},
            "maxItems": 1 if self.flat else MAX_DIMS,
        }
        if self.flat:
            shape["minItems"] = 1
        dtypes = floats if self.flat else names
        note = " A flat vector of floats, none NaN or Inf." if self.flat else ""
        if self.matrix:
            shape.update(minItems=2, maxItems=2)
            dtypes = ["float32"]
            note = " A float32 matrix (2 dimensions), none NaN or Inf."
        return {
            "type": "object",
            "description": (
                f"A tensor. On the wire: msgpack extension type {TENSOR_EXT} whose"
                " data is a header (uint8 dtype code, uint8 number of dimensions,"
                " each dimension as a little-endian uint64) and then the values,"
                " C order, little-endian; dtype codes 0.."
                f"{len(names) - 1} are {', '.join(names)}. In the JSON form of a"
                " message it is shown as its ext code, dtype, shape and size." + note
            ),
            "properties": {
                "ext": {"const": TENSOR_EXT},
                "dtype": {"enum": dtypes},
                "shape": shape,
                "nbytes": {"type": "integer", "minimum": 0},
            },
            "required": ["ext", "dtype", "shape", "nbytes"],
            "additionalProperties": False,
        }

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self.check,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda array: array
            ),
        )


Tensor = Annotated[np.ndarray, _TensorSchema(_as_array)]
"""Any array of a sendable dtype."""

FlatVector = Annotated[np.ndarray, _TensorSchema(_as_flat_finite, flat=True)]
"""A 1-D floating point vector with no NaN or Inf: model weights and updates."""


def _as_float32_matrix(value: Any) -> np.ndarray:
    array = _as_array(value)
    if array.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {array.shape}")
    if array.dtype != np.float32:
        raise ValueError(f"expected float32 values, got {array.dtype}")
    if not np.isfinite(array).all():
        raise ValueError("contains NaN or Inf")
    return array


FloatMatrix = Annotated[np.ndarray, _TensorSchema(_as_float32_matrix, matrix=True)]
"""A 2-D float32 matrix with no NaN or Inf: a client's data subspace."""
