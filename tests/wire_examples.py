"""One message of every kind, and every control message of the transport, with
fixed values: the golden byte vectors under tests/data/wire/ are their frames
(4-byte little-endian length, then the msgpack body).

    python tests/wire_examples.py   # rewrite tests/data/wire/*.hex

tests/test_wire_vectors.py checks that the codec still writes exactly these
bytes and reads them back to the same messages.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from clusterfed.protocol import (
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
    Message,
    PeerModel,
    ProbeReply,
    ProbeScore,
    ProbeTask,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    Welcome,
)
from clusterfed.protocol.transport import (
    Accepted,
    Auth,
    Challenge,
    ClientData,
    Hello,
    Leave,
    Refused,
    Update,
    mac,
)

WIRE = Path(__file__).resolve().parent / "data" / "wire"
TOKEN = "0123456789abcdef0123456789abcdef"
NONCE = bytes(range(16))


def _weights(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _down(payload: Message, n: int, round: int = 0) -> Envelope:
    return Envelope(
        msg_id=f"3fa9c1:{n}",
        sender="server",
        recipient="client/3",
        round=round,
        payload=payload,
    )


def _up(payload: Message, request: str | None, round: int = 0) -> Envelope:
    msg_id = f"client/3:re:{request}" if request else "client/3:join"
    return Envelope(
        msg_id=msg_id,
        sender="client/3",
        recipient="server",
        round=round,
        in_reply_to=request,
        payload=payload,
    )


def messages() -> dict[str, Envelope]:
    """name → envelope: every message kind at least once."""
    model = ClusterModel(cluster=0, weights=_weights(0.5, -1.0, 2.0))
    return {
        "join_request": _up(JoinRequest(client_id=3, n_train=90, n_test=23), None, -1),
        "welcome": _down(Welcome(client_id=3, cluster=0), 0, -1),
        "train_task": _down(
            TrainTask(models=(model,), config=TrainConfig(lr=0.05, batch_size=16)), 1
        ),
        "train_task_ifca": _down(
            TrainTask(
                models=(
                    model,
                    ClusterModel(cluster="global", weights=_weights(1, 2, 3)),
                ),
                config=TrainConfig(),
                identity=IdentityRule(name="min_loss"),
            ),
            2,
        ),
        "update_reply": _up(
            UpdateReply(
                cluster=0,
                delta=_weights(0.25, 0.0, -0.125),
                n_samples=90,
                loss=0.75,
                samples_seen=90,
            ),
            "3fa9c1:1",
        ),
        "evaluate_task": _down(EvaluateTask(model=model), 3),
        "evaluate_reply": _up(
            EvaluateReply(cluster=0, accuracy=0.5, loss=1.25, n_samples=23),
            "3fa9c1:3",
        ),
        "describe_task": _down(DescribeTask(), 4),
        "class_histogram": _up(
            ClassHistogram(client_id=3, counts=(40, 50)), "3fa9c1:4"
        ),
        "describe_task_subspace": _down(
            DescribeTask(want="data_subspace", n_basis=1, per_class=False), 5
        ),
        "data_subspace": _up(
            DataSubspace(client_id=3, basis=np.array([[1.0], [0.0]], np.float32)),
            "3fa9c1:5",
        ),
        "probe_task": _down(
            ProbeTask(models=(PeerModel(owner=1, weights=_weights(1, 2, 3)),)), 6
        ),
        "probe_reply": _up(
            ProbeReply(
                scores=(ProbeScore(owner=1, accuracy=0.25, loss=2.0),), n_samples=23
            ),
            "3fa9c1:6",
        ),
        "error": _up(ErrorReply(code="diverged", message="loss is nan"), "3fa9c1:1"),
        "leave": _up(LeaveNotice(client_id=3, reason="done"), None, -1).model_copy(
            update={"msg_id": "client/3:leave"}
        ),
        "shutdown": _down(Shutdown(reason="end of run"), 7, -1),
    }


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
    return {
        "hello": encode_control(Hello(protocol_version=2, client_id=3, want=("spec",))),
        "challenge": encode_control(Challenge(nonce=NONCE)),
        "auth": encode_control(Auth(mac=mac(TOKEN, NONCE, 3))),
        "accepted": encode_control(Accepted(client_id=3, data=data)),
        "refused": encode_control(Refused(reason="client 3: wrong credentials")),
        "update": encode_control(Update(spec='{"id": 3}')),
        "leave_order": encode_control(Leave(reason="scenario: leave")),
    }


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
