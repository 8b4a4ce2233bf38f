"""The wire protocol: round trips, exact tensors, and refusal of bad input."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterfed.protocol import (
    MAX_CLASSES,
    MAX_TEXT,
    MESSAGE_KINDS,
    PROTOCOL_VERSION,
    ClassHistogram,
    ClusterModel,
    DataSubspace,
    DescribeTask,
    Envelope,
    ErrorReply,
    EvaluateReply,
    EvaluateTask,
    IdentityRule,
    JoinRequest,
    LeaveNotice,
    PeerModel,
    ProbeReply,
    ProbeScore,
    ProbeTask,
    ProtocolError,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    Welcome,
    decode,
    encode,
    encode_many,
)
from clusterfed.protocol.tensor import TENSOR_EXT, pack_tensor, unpack_tensor

WEIGHTS = np.linspace(-1, 1, 7, dtype=np.float32)

PAYLOADS = [
    JoinRequest(client_id=3, n_train=40, n_test=10),
    LeaveNotice(client_id=3, reason="moved away"),
    Welcome(client_id=3, cluster=0),
    TrainTask(
        models=(
            ClusterModel(cluster=0, weights=WEIGHTS, last_update=WEIGHTS / 10),
            ClusterModel(cluster=1, weights=-WEIGHTS),
        ),
        config=TrainConfig(lr=0.1, mu=0.01),
        identity=IdentityRule(name="gradloss", params={"lam": 0.2}),
    ),
    UpdateReply(
        cluster=1,
        delta=WEIGHTS * 0.5,
        n_samples=40,
        loss=0.7,
        samples_seen=80,
        epsilon=3.25,
    ),
    EvaluateTask(model=ClusterModel(cluster=0, weights=WEIGHTS)),
    EvaluateReply(cluster=0, accuracy=0.9, loss=0.3, n_samples=10),
    DescribeTask(want="class_histogram"),
    ClassHistogram(client_id=3, counts=(12, 0, 7, 30)),
    DataSubspace(client_id=3, basis=np.eye(4, 2, dtype=np.float32)),
    ProbeTask(
        models=(
            PeerModel(owner=4, weights=WEIGHTS),
            PeerModel(owner=9, weights=-WEIGHTS),
        )
    ),
    ProbeReply(
        scores=(
            ProbeScore(owner=4, accuracy=0.75, loss=0.6),
            ProbeScore(owner=9, accuracy=0.5, loss=1.2),
        ),
        n_samples=12,
    ),
    ErrorReply(code="refused", message="no"),
    Shutdown(reason="done"),
]


UPDATE = next(i for i, p in enumerate(PAYLOADS) if p.kind == "update_reply")
TRAIN = next(i for i, p in enumerate(PAYLOADS) if p.kind == "train_task")


def envelope(payload, **changes) -> Envelope:  # type: ignore[no-untyped-def]
    fields = dict(
        msg_id="server:1",
        sender="server",
        recipient="client/3",
        round=2,
        payload=payload,
    )
    fields.update(changes)
    return Envelope(**fields)


def raw_update(**changes) -> dict:  # type: ignore[no-untyped-def]
    """A valid update envelope as a plain dict, to be mutated and packed by hand."""
    data = envelope(PAYLOADS[UPDATE]).model_dump(mode="python")
    data.update({k: v for k, v in changes.items() if k != "payload"})
    data["payload"].update(changes.get("payload", {}))
    return data


def pack(data: dict) -> bytes:
    def default(obj):  # type: ignore[no-untyped-def]
        return msgpack.ExtType(TENSOR_EXT, pack_tensor(obj))

    return msgpack.packb(data, default=default, use_bin_type=True)


def test_every_message_kind_is_covered() -> None:
    assert sorted(p.kind for p in PAYLOADS) == sorted(MESSAGE_KINDS)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.kind)
def test_every_message_kind_round_trips(payload) -> None:  # type: ignore[no-untyped-def]
    original = envelope(payload)
    decoded = decode(encode(original))
    assert decoded.model_dump(exclude={"payload"}) == original.model_dump(
        exclude={"payload"}
    )
    assert type(decoded.payload) is type(payload)
    assert repr(decoded) == repr(original)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([1e-38, -0.0, 3.4e38], dtype=np.float32),
        np.arange(5, dtype=np.float64),
        np.array([[1, -2]], dtype=np.int64),
        np.zeros((0, 3), dtype=np.float16),
        np.array(7, dtype=np.uint8),
        np.array([True, False]),
        np.arange(6, dtype=">f4"),  # big-endian input travels as little-endian
    ],
)
def test_tensors_keep_dtype_shape_and_bytes(array: np.ndarray) -> None:
    back = unpack_tensor(pack_tensor(array))
    assert back.shape == array.shape
    assert back.dtype == array.dtype.newbyteorder("<")
    assert back.astype(array.dtype).tobytes() == array.tobytes()


def test_an_update_without_dp_carries_no_epsilon() -> None:
    reply = UpdateReply(cluster=0, delta=WEIGHTS, n_samples=1, loss=0.0, samples_seen=1)
    assert decode(encode(envelope(reply))).payload.epsilon is None
    spent = reply.model_copy(update={"epsilon": 9.5})
    assert decode(encode(envelope(spent))).payload.epsilon == 9.5


def test_update_delta_comes_back_bit_for_bit() -> None:
    delta = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    reply = UpdateReply(cluster=0, delta=delta, n_samples=1, loss=0.0, samples_seen=1)
    back = decode(encode(envelope(reply))).payload
    assert back.delta.dtype == np.float32
    assert back.delta.tobytes() == delta.tobytes()


def test_encode_many_matches_encode_and_packs_a_shared_payload_once() -> None:
    shared = PAYLOADS[TRAIN]
    envelopes = [
        envelope(shared, recipient=f"client/{i}", msg_id=f"server:{i}")
        for i in range(4)
    ]
    assert encode_many(envelopes) == [encode(e) for e in envelopes]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (encode(envelope(PAYLOADS[UPDATE]))[:-9], "truncated"),
        (pack(raw_update(payload={"kind": "gossip"})), "gossip"),
        (pack(raw_update(protocol_version=PROTOCOL_VERSION + 1)), "protocol_version"),
        (pack(raw_update(payload={"sneaky": 1})), "sneaky"),
        (pack(raw_update(surprise=True)), "surprise"),
        (pack({**raw_update(), "round": "three"}), "round"),
        (
            pack(raw_update(payload={"delta": np.array([1, 2], dtype=np.int64)})),
            "floating",
        ),
        (
            pack(raw_update(payload={"delta": np.ones((2, 2), dtype=np.float32)})),
            "flat",
        ),
        (
            pack(
                raw_update(payload={"delta": np.array([1.0, np.nan], dtype=np.float32)})
            ),
            "NaN",
        ),
        (
            pack(raw_update(payload={"delta": np.array([np.inf], dtype=np.float32)})),
            "Inf",
        ),
        (pack(raw_update(payload={"loss": float("nan")})), "loss"),
        (pack(raw_update(payload={"n_samples": -1})), "n_samples"),
        (pack(raw_update(payload={"epsilon": -1.0})), "epsilon"),
        (pack(raw_update(payload={"epsilon": float("inf")})), "epsilon"),
        (msgpack.packb([1, 2, 3]), "map"),
        (b"", "truncated"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_input_raises_protocol_error_naming_the_problem(
    data: bytes, named: str
) -> None:
    with pytest.raises(ProtocolError, match=named):
        decode(data)


def _raw(payload, **changes) -> dict:  # type: ignore[no-untyped-def]
    """A valid envelope of `payload` as a plain dict with payload fields changed."""
    data = envelope(payload).model_dump(mode="python")
    data["payload"].update(changes)
    return data


HISTOGRAM = next(p for p in PAYLOADS if p.kind == "class_histogram")
PROBE_TASK = next(p for p in PAYLOADS if p.kind == "probe_task")
PROBE_REPLY = next(p for p in PAYLOADS if p.kind == "probe_reply")


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (pack(_raw(HISTOGRAM, counts=[3, -1, 2])), "counts.1"),
        (pack(_raw(HISTOGRAM, counts=[])), "counts"),
        (pack(_raw(HISTOGRAM, counts=[1] * (MAX_CLASSES + 1))), "counts"),
        (pack(_raw(HISTOGRAM, counts=[1.5, 2])), "counts.0"),
        (pack(_raw(HISTOGRAM, counts=[2**60])), "counts.0"),
        (pack(_raw(HISTOGRAM, samples=[[0.1]])), "samples"),
        (pack(_raw(DescribeTask(), want="raw_samples")), "want"),
        (pack(_raw(PROBE_TASK, models=[])), "models"),
        (
            pack(_raw(PROBE_TASK, models=[{"owner": -1, "weights": WEIGHTS}])),
            "owner",
        ),
        (
            pack(
                _raw(
                    PROBE_REPLY,
                    scores=[{"owner": 4, "accuracy": 1.5, "loss": 0.1}],
                )
            ),
            "accuracy",
        ),
        (
            pack(
                _raw(
                    PROBE_REPLY,
                    scores=[{"owner": 4, "accuracy": 0.5, "loss": float("nan")}],
                )
            ),
            "loss",
        ),
        (pack(_raw(PROBE_REPLY, compute_s=0.05)), "compute_s"),
    ],
    ids=[
        "negative count",
        "empty histogram",
        "histogram too long",
        "fractional count",
        "huge count",
        "histogram with samples",
        "unknown description",
        "probe without models",
        "negative owner",
        "accuracy over 1",
        "NaN loss",
        "a claimed compute time",
    ],
)
def test_malformed_histograms_and_probes_are_refused(data: bytes, named: str) -> None:
    with pytest.raises(ProtocolError, match=named):
        decode(data)


def test_bad_dtype_code_is_named() -> None:
    payload = bytearray(pack_tensor(WEIGHTS))
    payload[0] = 99
    data = pack(
        raw_update(payload={"delta": msgpack.ExtType(TENSOR_EXT, bytes(payload))})
    )
    with pytest.raises(ProtocolError, match="dtype code 99"):
        decode(data)


def test_shape_and_bytes_mismatch_is_named() -> None:
    payload = pack_tensor(WEIGHTS)[:-4]  # one float32 short
    data = pack(raw_update(payload={"delta": msgpack.ExtType(TENSOR_EXT, payload)}))
    with pytest.raises(
        ProtocolError, match=r"shape \(7,\) of float32 needs 28 bytes, 24 were sent"
    ):
        decode(data)


def test_unknown_extension_type_is_named() -> None:
    data = pack(raw_update(payload={"delta": msgpack.ExtType(42, b"x")}))
    with pytest.raises(ProtocolError, match="extension type 42"):
        decode(data)


def test_payload_over_the_size_limit_is_refused_before_parsing() -> None:
    data = encode(envelope(PAYLOADS[UPDATE]))
    with pytest.raises(ProtocolError, match="over the limit"):
        decode(data, max_bytes=len(data) - 1)
    assert decode(data, max_bytes=len(data)).payload.kind == "update_reply"


def test_objects_that_are_not_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="expected bytes"):
        decode("text")  # type: ignore[arg-type]


def test_messages_are_frozen_and_forbid_extra_fields() -> None:
    with pytest.raises(Exception, match="frozen"):
        PAYLOADS[0].n_train = 5  # type: ignore[misc]
    with pytest.raises(Exception, match="Extra inputs"):
        JoinRequest(client_id=1, n_train=1, n_test=1, samples=[1, 2])  # type: ignore[call-arg]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    try:
        result = decode(data)
    except ProtocolError:
        return
    assert isinstance(result, Envelope)


VALID = [encode(envelope(p)) for p in PAYLOADS]


@settings(max_examples=600, deadline=None)
@given(
    which=st.integers(0, len(VALID) - 1),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert"]),
            st.integers(0, 10**6),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_valid_messages_only_ever_raise_protocol_error(which, edits) -> None:  # type: ignore[no-untyped-def]
    data = bytearray(VALID[which])
    for op, position, value in edits:
        at = position % (len(data) + 1)
        if op == "flip" and data:
            data[at % len(data)] ^= value or 1
        elif op == "cut":
            del data[at:]
        else:
            data[at:at] = bytes([value])
    try:
        result = decode(bytes(data))
    except ProtocolError:
        return
    assert isinstance(result, Envelope)


# -- hostile numbers and decode bombs (issue 17) --------------------------------


def _update_raw(**payload: object) -> dict[str, object]:
    raw = msgpack.unpackb(
        encode(
            Envelope(
                msg_id="client/1:re:abc123:4",
                sender="client/1",
                recipient="server",
                round=2,
                payload=UpdateReply(
                    cluster=0, delta=WEIGHTS, n_samples=40, loss=0.5, samples_seen=40
                ),
            )
        ),
        raw=False,
        ext_hook=lambda c, d: msgpack.ExtType(c, d),
    )
    raw["payload"].update(payload)
    return raw  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_samples", "12"),
        ("n_samples", 4.0),
        ("n_samples", True),
        ("n_samples", "1" * 400),
        ("n_samples", 2**63 - 1),
        ("n_samples", -1),
        ("cluster", "0"),
        ("loss", "0.5"),
        ("loss", True),
        ("loss", -1e308),
        ("cluster", "Global"),
        ("cluster", True),
        ("cluster", 2**31),
        ("samples_seen", 2**31),
        ("samples_seen", -1),
        ("samples_seen", "40"),
        ("samples_seen", 40.0),
        ("compute_s", 0.1),
        ("epsilon", 1e308),
    ],
)
def test_reported_numbers_are_strict_and_bounded(field: str, value: object) -> None:
    data = msgpack.packb(_update_raw(**{field: value}), use_bin_type=True)
    with pytest.raises(ProtocolError, match=f"update_reply.{field}"):
        decode(data)


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "error", "code": "internal", "message": "x" * (MAX_TEXT + 1)},
        {"kind": "shutdown", "reason": "x" * (MAX_TEXT + 1)},
        {"kind": "leave", "client_id": 1, "reason": "x" * (MAX_TEXT + 1)},
    ],
)
def test_free_text_over_its_bound_is_refused(payload: dict[str, object]) -> None:
    raw = _update_raw()
    raw["payload"] = payload
    with pytest.raises(ProtocolError, match="at most 1024 characters"):
        decode(msgpack.packb(raw, use_bin_type=True))


def test_a_sender_cuts_an_error_message_to_the_bound() -> None:
    reply = ErrorReply.of("internal", "y" * 5000)
    assert reply.message == "y" * MAX_TEXT
    assert decode(encode(envelope(reply))).payload == reply


def test_a_megabyte_of_empty_maps_is_refused_fast_small_and_briefly() -> None:
    import time
    import tracemalloc

    raw = {
        "protocol_version": PROTOCOL_VERSION,
        "msg_id": "x",
        "sender": "client/1",
        "recipient": "server",
        "round": 0,
        "in_reply_to": None,
        "payload": {
            "kind": "class_histogram",
            "client_id": 1,
            "counts": [{}] * 1_000_000,
        },
    }
    data = msgpack.packb(raw)
    assert len(data) >= 1_000_000
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ProtocolError) as refused:
            decode(data)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 100 * 1024 * 1024
    assert len(str(refused.value)) < 1000


@pytest.mark.parametrize("items", [65_537, 100_000, 131_072])
def test_a_field_over_its_item_limit_is_refused_before_its_items_are_built(
    items: int,
) -> None:
    raw = _update_raw()
    raw["payload"] = {"kind": "class_histogram", "client_id": 1}
    raw["payload"]["counts"] = [{}] * items  # type: ignore[index]
    with pytest.raises(ProtocolError, match=f"counts: {items} items, at most 65536"):
        decode(msgpack.packb(raw))


def test_many_wrong_items_make_one_short_reason() -> None:
    raw = _update_raw()
    raw["payload"] = {"kind": "class_histogram", "client_id": 1}
    raw["payload"]["counts"] = ["x"] * 60_000  # type: ignore[index]
    with pytest.raises(ProtocolError) as refused:
        decode(msgpack.packb(raw))
    reason = str(refused.value)
    assert "counts.0" in reason and len(reason) <= 300 and "\n" not in reason


def test_long_strings_are_refused_by_the_decoder() -> None:
    raw = _update_raw()
    raw["payload"] = {"kind": "error", "code": "x", "message": "y" * 8_000_000}
    with pytest.raises(ProtocolError, match="max_str_len"):
        decode(msgpack.packb(raw))


def test_one_line_strips_control_characters_and_caps_the_length() -> None:
    from clusterfed.protocol import one_line

    assert one_line("a\x1b[31mb\nc\r\td") == "a [31mb c d"
    assert len(one_line("z" * 10_000)) == 300
    assert one_line("z" * 10_000).endswith("…")
