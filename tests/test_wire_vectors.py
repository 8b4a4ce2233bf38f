"""The golden byte vectors of docs/protocol.md (tests/data/wire/): the codec
still writes exactly these bytes and reads them back to the same messages."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from wire_examples import NONCE, TOKEN, WIRE, controls, messages

from clusterfed.protocol import MESSAGE_KINDS, decode, encode
from clusterfed.protocol.transport import (
    PREFIX,
    Auth,
    decode_control,
    frame,
    is_control,
    verify,
)


def _golden(name: str) -> bytes:
    return bytes.fromhex((WIRE / f"{name}.hex").read_text().strip())


def test_every_message_kind_has_a_golden_vector() -> None:
    kinds = {e.payload.kind for e in messages().values()}
    assert kinds == set(MESSAGE_KINDS)


@pytest.mark.parametrize("name", sorted(messages()))
def test_the_codec_writes_and_reads_the_golden_bytes(name: str) -> None:
    envelope = messages()[name]
    golden = _golden(name)
    assert frame(encode(envelope)) == golden
    (size,) = PREFIX.unpack(golden[:4])
    assert size == len(golden) - 4
    back = decode(golden[4:])
    assert back.payload.kind == envelope.payload.kind
    assert encode(back) == golden[4:]  # read back to the same message
    assert not is_control(golden[4:])


@pytest.mark.parametrize("name", sorted(controls()))
def test_the_handshake_writes_and_reads_the_golden_bytes(name: str) -> None:
    body = controls()[name]
    golden = _golden(name)
    assert frame(body) == golden
    assert is_control(golden[4:])
    decoded = decode_control(golden[4:])
    assert decoded.type == msgpack.unpackb(golden[4:])["type"]


def test_the_golden_auth_is_the_hmac_of_its_nonce_by_an_independent_computation() -> (
    None
):
    import hashlib
    import hmac

    auth = decode_control(_golden("auth")[4:])
    assert isinstance(auth, Auth)
    expected = hmac.new(
        TOKEN.encode(),
        b"clusterfed-auth" + NONCE + (3).to_bytes(8, "little"),
        hashlib.sha256,
    ).digest()
    assert auth.mac == expected
    assert verify(TOKEN, NONCE, 3, auth.mac)
    assert not verify(TOKEN, bytes(16), 3, auth.mac)


def test_a_golden_update_reply_read_by_plain_msgpack_matches_the_docs() -> None:
    # The layout docs/protocol.md states, read without our codec.
    raw = msgpack.unpackb(_golden("update_reply")[4:], raw=False)
    assert list(raw) == [
        "protocol_version", "msg_id", "sender", "recipient", "round",
        "in_reply_to", "payload",
    ]  # fmt: skip
    delta = raw["payload"]["delta"]
    assert delta.code == 1
    assert delta.data[:2] == bytes([0, 1])
    assert int.from_bytes(delta.data[2:10], "little") == 3
    values = np.frombuffer(delta.data[10:], "<f4")
    np.testing.assert_array_equal(values, [0.25, 0.0, -0.125])
