"""One message of every kind, and every control message of the transport, with
fixed values: the golden byte vectors under tests/data/wire/ are their frames
(4-byte little-endian length, then the msgpack body).

    python tests/wire_examples.py   # rewrite tests/data/wire/*.hex

tests/test_wire_vectors.py checks that the codec still writes exactly these
bytes and reads them back to the same messages.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from clusterfed import protocol
from clusterfed.protocol.transport import (
    Accepted,
    Auth,
    Challenge,
    ClientData,
    Control,
    Hello,
    Leave,
    Refused,
    Update,
    mac,
)

WIRE = Path(__file__).resolve().parent / "data" / "wire"
TOKEN = "0123456789abcdef0123456789abcdef"
NONCE = bytes(range(16))

T = TypeVar("T")


def _weights(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _down(payload: protocol.Message, n: int, round: int = 0) -> protocol.Envelope:
    return protocol.Envelope(
        msg_id=f"3fa9c1:{n}",
        sender="server",
        recipient="client/3",
        round=round,
        payload=payload,
    )


def _up(
    payload: protocol.Message, request: str | None, round: int = 0
) -> protocol.Envelope:
    msg_id = f"client/3:re:{request}" if request else "client/3:join"
    return protocol.Envelope(
        msg_id=msg_id,
        sender="client/3",
        recipient="server",
        round=round,
        in_reply_to=request,
        payload=payload,
    )


def messages() -> dict[str, protocol.Envelope]:
    """name → envelope: every message kind once, named by its kind, and the
    variants of a kind that carry more, named `<kind>_<variant>`."""
    model = protocol.ClusterModel(cluster=0, weights=_weights(0.5, -1.0, 2.0))
    one_of_each = [
        _up(protocol.JoinRequest(client_id=3, n_train=90, n_test=23), None, -1),
        _down(protocol.Welcome(client_id=3, cluster=0), 0, -1),
        _down(
            protocol.TrainTask(
                models=(model,), config=protocol.TrainConfig(lr=0.05, batch_size=16)
            ),
            1,
        ),
        _up(
            protocol.UpdateReply(
                cluster=0,
                delta=_weights(0.25, 0.0, -0.125),
                n_samples=90,
                loss=0.75,
                samples_seen=90,
            ),
            "3fa9c1:1",
        ),
        _down(protocol.EvaluateTask(model=model), 3),
        _up(
            protocol.EvaluateReply(cluster=0, accuracy=0.5, loss=1.25, n_samples=23),
            "3fa9c1:3",
        ),
        _down(protocol.DescribeTask(), 4),
        _up(protocol.ClassHistogram(client_id=3, counts=(40, 50)), "3fa9c1:4"),
        _up(
            protocol.DataSubspace(
                client_id=3, basis=np.array([[1.0], [0.0]], np.float32)
            ),
            "3fa9c1:5",
        ),
        _down(
            protocol.ProbeTask(
                models=(protocol.PeerModel(owner=1, weights=_weights(1, 2, 3)),)
            ),
            6,
        ),
        _up(
            protocol.ProbeReply(
                scores=(protocol.ProbeScore(owner=1, accuracy=0.25, loss=2.0),),
                n_samples=23,
            ),
            "3fa9c1:6",
        ),
        _up(protocol.ErrorReply(code="diverged", message="loss is nan"), "3fa9c1:1"),
        _up(protocol.LeaveNotice(client_id=3, reason="done"), None, -1).model_copy(
            update={"msg_id": "client/3:leave"}
        ),
        _down(protocol.Shutdown(reason="end of run"), 7, -1),
    ]
    variants = {
        "ifca": _down(
            protocol.TrainTask(
                models=(
                    model,
                    protocol.ClusterModel(cluster="global", weights=_weights(1, 2, 3)),
                ),
                config=protocol.TrainConfig(),
                identity=protocol.IdentityRule(name="min_loss"),
            ),
            2,
        ),
        "subspace": _down(
            protocol.DescribeTask(want="data_subspace", n_basis=1, per_class=False), 5
        ),
    }
    named = _by_name(one_of_each, lambda e: e.payload.kind)
    return named | {f"{e.payload.kind}_{v}": e for v, e in variants.items()}


def _by_name(examples: list[T], name: Callable[[T], str]) -> dict[str, T]:
    """`examples` by their `name`, which must differ."""
    named = {name(e): e for e in examples}
    if len(named) != len(examples):
        raise ValueError("two examples of one kind: name the second a variant")
    return named


def controls() -> dict[str, bytes]:
    """name → frame body of each control message of the handshake."""
    from clusterfed.protocol.transport import encode_control

    data = ClientData(
        x_train=np.array([[0.0, 1.0]], np.float32),
        y_train=np.array([1], np.int64),
        x_test=np.array([[1.0, 0.0]], np.float32),
        y_test=np.array([0], np.int64),
        n_classes=2,
    )
    one_of_each: list[Control] = [
        Hello(protocol_version=2, client_id=3, want=("spec",)),
        Challenge(nonce=NONCE),
        Auth(mac=mac(TOKEN, NONCE, 3)),
        Accepted(client_id=3, data=data),
        Refused(reason="client 3: wrong credentials"),
        Update(spec='{"id": 3}'),
        Leave(reason="scenario: leave"),
    ]
    # Named by its type, but the server's `leave` order, which a client's
    # leave notice (a message kind) names already.
    named = _by_name(
        one_of_each, lambda c: "leave_order" if isinstance(c, Leave) else c.type
    )
    return {name: encode_control(c) for name, c in named.items()}


def write() -> None:
    from clusterfed.protocol import encode
    from clusterfed.protocol.transport import frame

    WIRE.mkdir(parents=True, exist_ok=True)
    bodies = {name: encode(e) for name, e in messages().items()} | controls()
    for name, body in bodies.items():
        (WIRE / f"{name}.hex").write_text(frame(body).hex() + "\n")


if __name__ == "__main__":
    write()
    sys.exit(0)
