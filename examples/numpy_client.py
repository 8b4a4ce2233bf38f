"""A clusterfed client written from docs/protocol.md alone: msgpack and numpy,
no clusterfed import. It trains softmax regression (the `mlp` model with
`hidden = []`) and answers every task kind.

    client = NumpyClient(3, x_train, y_train, x_test, y_test, n_classes=10)
    join = client.join_request()          # bytes to send to the server
    reply = client.handle(request_bytes)  # bytes of the reply

tests/test_protocol_kit.py drives it against a real parameter server. Over
TCP, against `clusterfed serve … --external N` (docs/protocol.md, *Transport*),
asking the server for its samples:

    python examples/numpy_client.py --connect HOST:PORT --id N --token TOKEN
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import socket
import struct
import sys
import time
from typing import Any

import msgpack
import numpy as np

PROTOCOL_VERSION = 2
TENSOR_EXT = 1
DTYPES = [
    "float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"
]  # fmt: skip


# -- the tensor extension: uint8 dtype code, uint8 ndim, ndim × uint64 shape,
#    then the values, C order, little-endian ------------------------------------


def pack_tensor(array: np.ndarray) -> msgpack.ExtType:
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    code = DTYPES.index(array.dtype.name)
    header = struct.pack("<BB", code, little.ndim)
    header += struct.pack(f"<{little.ndim}Q", *little.shape)
    return msgpack.ExtType(TENSOR_EXT, header + little.tobytes())


def unpack_tensor(code: int, data: bytes) -> Any:
    if code != TENSOR_EXT:
        return msgpack.ExtType(code, data)
    dtype_code, ndim = struct.unpack_from("<BB", data)
    shape = struct.unpack_from(f"<{ndim}Q", data, 2)
    dtype = np.dtype(DTYPES[dtype_code]).newbyteorder("<")
    return np.frombuffer(data, dtype=dtype, offset=2 + 8 * ndim).reshape(shape)


def encode(envelope: dict[str, Any]) -> bytes:
    def default(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return pack_tensor(obj)
        raise TypeError(type(obj).__name__)

    return msgpack.packb(envelope, default=default, use_bin_type=True)


def decode(data: bytes) -> dict[str, Any]:
    return msgpack.unpackb(data, ext_hook=unpack_tensor, raw=False)


# -- softmax regression: weights are W (classes × features, row-major), then b --


def split(weights: np.ndarray, n_features: int, n_classes: int) -> tuple[Any, Any]:
    w = weights[: n_classes * n_features].reshape(n_classes, n_features)
    return w.astype(np.float64), weights[n_classes * n_features :].astype(np.float64)


def loss_and_grad(
    w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    logits = x @ w.T + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
    error = p.copy()
    error[np.arange(len(y)), y] -= 1.0
    return loss, error.T @ x / len(y), error.mean(axis=0), p


class NumpyClient:
    """One client: its data, and an answer to every request."""

    def __init__(
        self,
        client_id: int,
        x_train: np.ndarray,
        y_train: np.ndarray,
        x_test: np.ndarray,
        y_test: np.ndarray,
        *,
        n_classes: int,
        seed: int = 0,
    ) -> None:
        self.id = client_id
        self.address = f"client/{client_id}"
        self.x_train = x_train.reshape(len(x_train), -1).astype(np.float64)
        self.y_train = np.asarray(y_train, dtype=np.int64)
        self.x_test = x_test.reshape(len(x_test), -1).astype(np.float64)
        self.y_test = np.asarray(y_test, dtype=np.int64)
        self.n_classes = n_classes
        self.rng = np.random.default_rng(seed)

    def join_request(self) -> bytes:
        return encode(
            self._envelope(
                {
                    "kind": "join_request",
                    "client_id": self.id,
                    "n_train": len(self.y_train),
                    "n_test": len(self.y_test),
                },
                msg_id=f"{self.address}:join",
                round=-1,
            )
        )

    def handle(self, data: bytes) -> bytes:
        try:
            request = decode(data)
            version = request["protocol_version"]
            if version != PROTOCOL_VERSION:
                raise ValueError(
                    f"protocol_version: {version!r} is not supported"
                    f" (this side speaks {PROTOCOL_VERSION})"
                )
            payload = request["payload"]
            kind = payload["kind"]
        except Exception as exc:  # not a message: say so, never crash
            error = {"kind": "error", "code": "bad_message", "message": str(exc)[:200]}
            return encode(
                self._envelope(error, msg_id=f"{self.address}:error", round=-1)
            )
        if kind == "train_task":
            reply = self._train(payload)
        elif kind == "evaluate_task":
            model = payload["model"]
            accuracy, loss = self._score(model["weights"])
            reply = {
                "kind": "evaluate_reply",
                "cluster": model["cluster"],
                "accuracy": accuracy,
                "loss": loss,
                "n_samples": len(self.y_test),
            }
        elif kind == "probe_task":
            scores = []
            for peer in payload["models"]:
                accuracy, loss = self._score(peer["weights"])
                scores.append(
                    {"owner": peer["owner"], "accuracy": accuracy, "loss": loss}
                )
            reply = {
                "kind": "probe_reply",
                "scores": scores,
                "n_samples": len(self.y_test),
            }
        elif kind == "describe_task":
            counts = np.bincount(self.y_train, minlength=self.n_classes)
            reply = {
                "kind": "class_histogram",
                "client_id": self.id,
                "counts": [int(c) for c in counts],
            }
        elif kind == "shutdown":
            reply = {"kind": "shutdown", "reason": "acknowledged"}
        else:
            reply = {"kind": "error", "code": "unexpected", "message": kind}
        # A reply's id derives from its request's: the server checks it.
        return encode(
            self._envelope(
                reply,
                msg_id=f"{self.address}:re:{request['msg_id']}"[:128],
                round=request["round"],
                recipient=request["sender"],
                in_reply_to=request["msg_id"],
            )
        )

    def _train(self, task: dict[str, Any]) -> dict[str, Any]:
        config = task["config"]
        models = task["models"]
        n = len(self.y_train)
        chosen, seen = models[0], 0
        if len(models) > 1:
            # Several candidates: the one with the lowest training loss, each
            # scored on every training sample (samples processed too).
            chosen = min(models, key=lambda m: self._loss(m["weights"]))
            seen = n * len(models)
        start = np.asarray(chosen["weights"], dtype=np.float32)
        n_features = self.x_train.shape[1]
        w, b = split(start, n_features, self.n_classes)
        w0, b0 = w.copy(), b.copy()
        vw, vb = np.zeros_like(w), np.zeros_like(b)
        total, trained = 0.0, 0
        for _ in range(config["epochs"]):
            order = self.rng.permutation(n)
            for first in range(0, n, config["batch_size"]):
                batch = order[first : first + config["batch_size"]]
                loss, gw, gb, _ = loss_and_grad(
                    w, b, self.x_train[batch], self.y_train[batch]
                )
                total += loss * len(batch)
                trained += len(batch)
                gw += config["weight_decay"] * w + config["mu"] * (w - w0)
                gb += config["weight_decay"] * b + config["mu"] * (b - b0)
                vw = config["momentum"] * vw + gw
                vb = config["momentum"] * vb + gb
                w -= config["lr"] * vw
                b -= config["lr"] * vb
        end = np.concatenate([w.ravel(), b]).astype(np.float32)
        return {
            "kind": "update_reply",
            "cluster": chosen["cluster"],
            "delta": end - start,
            "n_samples": n,
            "loss": total / trained,
            "samples_seen": seen + trained,
            "epsilon": None,
        }

    def _loss(self, weights: np.ndarray) -> float:
        w, b = split(np.asarray(weights), self.x_train.shape[1], self.n_classes)
        return loss_and_grad(w, b, self.x_train, self.y_train)[0]

    def _score(self, weights: np.ndarray) -> tuple[float, float]:
        w, b = split(np.asarray(weights), self.x_test.shape[1], self.n_classes)
        loss, _, _, p = loss_and_grad(w, b, self.x_test, self.y_test)
        return float((p.argmax(axis=1) == self.y_test).mean()), loss

    def _envelope(
        self,
        payload: dict[str, Any],
        *,
        msg_id: str,
        round: int,
        recipient: str = "server",
        in_reply_to: str | None = None,
    ) -> dict[str, Any]:
        return {
            "protocol_version": PROTOCOL_VERSION,
            "msg_id": msg_id,
            "sender": self.address,
            "recipient": recipient,
            "round": round,
            "in_reply_to": in_reply_to,
            "payload": payload,
        }


# -- the TCP transport: 4-byte little-endian length frames, HMAC handshake ------

MAX_FRAME = 256 * 1024 * 1024


class Refused(Exception):
    """The server refused the credentials."""


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack("<I", len(body)) + body)


def receive_frame(sock: socket.socket) -> bytes | None:
    """The next frame's body; None when the server closed the connection.
    A frame over the limit is refused on its length: ConnectionError."""
    prefix = receive_exactly(sock, 4)
    if prefix is None:
        return None
    size = struct.unpack("<I", prefix)[0]
    if size > MAX_FRAME:
        raise ConnectionError(f"a frame of {size} bytes is over the limit")
    return receive_exactly(sock, size)


def receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def client_from(client_id: int, data: dict[str, Any]) -> NumpyClient:
    """A client of the samples an `accepted` (or `update`) carries."""
    return NumpyClient(
        client_id,
        data["x_train"],
        data["y_train"],
        data["x_test"],
        data["y_test"],
        n_classes=data["n_classes"],
        seed=client_id,
    )


def session(host: str, port: int, client_id: int, token: str) -> str | None:
    """One connection: "shutdown" or "left" when the run is over for this
    client, None when the connection dropped before."""
    with socket.create_connection((host, port)) as sock:
        hello = {"type": "hello", "protocol_version": PROTOCOL_VERSION,
                 "client_id": client_id, "want": ["data"]}  # fmt: skip
        send_frame(sock, msgpack.packb(hello))
        challenge = decode(receive_frame(sock) or b"\xc0")
        message = b"clusterfed-auth" + challenge["nonce"] + struct.pack("<Q", client_id)
        code = hmac.new(token.encode(), message, hashlib.sha256).digest()
        send_frame(sock, msgpack.packb({"type": "auth", "mac": code}))
        answer = decode(receive_frame(sock) or b"\xc0")
        if answer.get("type") != "accepted":
            raise Refused(str(answer.get("reason", answer)))
        client = client_from(client_id, answer["data"])
        send_frame(sock, client.join_request())
        done = False
        while (body := receive_frame(sock)) is not None:
            try:
                frame = decode(body)
            except Exception:  # not msgpack: answered with an error reply
                frame = {}
            if not isinstance(frame, dict):
                frame = {}
            if frame.get("type") == "update" and "data" in frame:
                client = client_from(client_id, frame["data"])
            elif frame.get("type") == "leave":
                notice = {"kind": "leave", "client_id": client_id,
                          "reason": frame.get("reason", "")}  # fmt: skip
                send_frame(sock, encode(client._envelope(
                    notice, msg_id=f"{client.address}:leave", round=-1)))  # fmt: skip
                return "left"
            elif "type" not in frame:
                send_frame(sock, client.handle(body))
                payload = frame.get("payload")
                done = isinstance(payload, dict) and payload.get("kind") == "shutdown"
        return "shutdown" if done else None


def connect(
    host: str, port: int, client_id: int, token: str, retry_s: float = 30
) -> str:
    """Serve one run over TCP, connecting again (for `retry_s` seconds) when
    a connection drops; how it ended ("shutdown" or "left")."""
    waited = 0.0
    while True:
        try:
            ended = session(host, port, client_id, token)
            waited = 0.0
        except (OSError, ValueError) as exc:  # no server, a dropped or bad frame
            if waited > retry_s:
                raise ConnectionError(f"gave up after {retry_s} s: {exc}") from exc
            ended = None
        if ended is not None:
            return ended
        time.sleep(0.2)
        waited += 0.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connect", required=True, metavar="HOST:PORT")
    parser.add_argument("--id", required=True, type=int)
    parser.add_argument("--token", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.connect.rpartition(":")
    try:
        ended = connect(host or "127.0.0.1", int(port), args.id, args.token)
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"client {args.id}: {ended}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
