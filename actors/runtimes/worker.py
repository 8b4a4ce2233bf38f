"""A forked worker of the processes runtime: what runs in the child process.

The worker reads frames (`frames.py`) from its socket, one at a time, with
blocking calls: it has nothing else to do between them. It hosts its share of
the clients in one `ClientHost`, computes on one thread (torch's and BLAS's),
and answers every frame that wants an answer with exactly one frame, in
order, so a faulty client that does not answer (`faults.py`) still gets a
no-reply frame and the worker goes on serving the requests behind it.

A client's state (its privacy accountant, a faulty client's memory) travels
pickled: it is the parent's own data on its way to its own forked worker,
never a message from a peer.

A worker ends with the process that started it, however that one ends: it
holds only its own end of its socket (so the other end's close reaches it as
end of file), and on Linux the kernel kills it when its parent dies
(`PR_SET_PDEATHSIG`), even in the middle of training.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pickle
import select
import signal
import socket
import sys
from collections.abc import Mapping

from clusterfed.types import ClientId

from ..faults import load_spec
from ..host import ClientHost, compute_on_one_thread
from . import frames
from .frames import HEADER, KEY


def serve(sock: socket.socket, parents_end: socket.socket, parent: int) -> None:
    """A worker's loop: build clients from specs, answer their requests."""
    _die_with_parent(parent)
    # Ctrl-C reaches the whole process group: the parent decides what it
    # means (finish the round, then stop); a worker dying mid-task would not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parents_end.close()  # else the parent's death would never read as EOF here
    compute_on_one_thread()
    loop = asyncio.new_event_loop()
    host = ClientHost()
    kept: dict[int, bytes] = {}
    pushed_back: Frame | None = None
    with sock:
        while True:
            frame, pushed_back = pushed_back or _read_frame(sock), None
            if frame is None:
                return
            kind, client_id, body = frame
            if kind == frames.STOP:
                return
            if kind == frames.KEEP:
                kept[client_id] = body
                continue
            if kind == frames.FORGET:
                kept.pop(client_id, None)
                continue
            if kind == frames.REGISTER:
                spec = load_spec(body)
                if client_id in host.clients:
                    host.update(spec)  # it keeps its memory
                else:
                    host.add([spec])  # a client this (new) worker lost
                continue
            if kind in (frames.DELIVER, frames.CITE) and host.cohort > 1:
                pushed_back = _serve_cohort(sock, loop, host, kept, frame)
                continue
            try:
                reply = answer(loop, host, kept, kind, client_id, body)
            except Exception as exc:
                _send_error(sock, client_id, exc)
                continue
            _send_reply(sock, client_id, reply)


Frame = tuple[int, int, bytes]


def _read_frame(sock: socket.socket) -> Frame | None:
    """The next frame; None at end of file (the parent is gone)."""
    header = _read_exactly(sock, HEADER.size)
    if header is None:
        return None
    kind, client_id, size = HEADER.unpack(header)
    body = _read_exactly(sock, size) if size else b""
    return None if body is None else (kind, client_id, body)


def _serve_cohort(
    sock: socket.socket,
    loop: asyncio.AbstractEventLoop,
    host: ClientHost,
    kept: dict[int, bytes],
    first: Frame,
) -> Frame | None:
    """Answer `first` and the requests already waiting behind it (up to the
    host's cohort) together, so their train tasks can train as one cohort
    (`ClientHost.handle_many`), each answered in order. A client's state
    asked for behind its request (a private client's accountant) is read
    after the cohort trained, so it holds that training. Returns the frame
    that ended the read-ahead (neither a request, a state nor a kept body),
    to be handled next; None if none was read."""
    batch: list[tuple[int, bytes | Exception]] = [_delivered(kept, first)]
    order: list[tuple[int, int, bytes]] = [(first[0], first[1], b"")]
    stop: Frame | None = None
    while len(batch) < host.cohort and _waiting(sock):
        frame = _read_frame(sock)
        if frame is None:
            break  # the end of file reads as such again next time
        kind, client_id, body = frame
        if kind == frames.KEEP:
            kept[client_id] = body
        elif kind == frames.FORGET:
            kept.pop(client_id, None)
        elif kind in (frames.DELIVER, frames.CITE):
            batch.append(_delivered(kept, frame))
            order.append((kind, client_id, b""))
        elif kind == frames.STATE:
            order.append(frame)
        else:
            stop = frame
            break
    ready = [(cid, data) for cid, data in batch if isinstance(data, bytes)]
    replies = iter(loop.run_until_complete(host.handle_many(ready)))
    requests = iter(batch)
    for kind, client_id, body in order:
        if kind == frames.STATE:
            try:
                state = answer(loop, host, kept, kind, client_id, body)
            except Exception as exc:
                _send_error(sock, client_id, exc)
                continue
            _send_reply(sock, client_id, state)
            continue
        cid, data = next(requests)
        reply = data if isinstance(data, Exception) else next(replies)
        if isinstance(reply, Exception):
            _send_error(sock, cid, reply)
        else:
            _send_reply(sock, cid, reply)
    return stop


def _delivered(
    kept: Mapping[int, bytes], frame: Frame
) -> tuple[int, bytes | Exception]:
    """A DELIVER or CITE frame's client and request (a CITE's body joined
    to the kept one), or the error of citing a body that is not kept."""
    kind, client_id, body = frame
    if kind == frames.DELIVER:
        return client_id, body
    (key,) = KEY.unpack_from(body)
    if key not in kept:
        return client_id, LookupError(
            f"cites request body {key}, which is not kept here"
        )
    return client_id, body[KEY.size :] + kept[key]


def _waiting(sock: socket.socket) -> bool:
    """Whether a frame is waiting in `sock`, or comes within 2 ms: the
    requests of a round are sent one after another, and a cohort should not
    start with the first alone. Who shares a cohort changes no result."""
    return bool(select.select([sock], [], [], 0.002)[0])


def _send_reply(sock: socket.socket, client_id: int, reply: bytes | None) -> None:
    if reply is None:  # a faulty client that does not answer
        send_frame(sock, frames.NO_REPLY, client_id, b"")
    else:
        send_frame(sock, frames.REPLY, client_id, reply)


def _send_error(sock: socket.socket, client_id: int, exc: Exception) -> None:
    send_frame(sock, frames.ERROR, client_id, f"{type(exc).__name__}: {exc}".encode())


def send_frame(sock: socket.socket, kind: int, client_id: int, body: bytes) -> None:
    """A worker's answer: its header, then its body (not copied into one)."""
    sock.sendall(HEADER.pack(kind, client_id, len(body)))
    if body:
        sock.sendall(body)


def answer(
    loop: asyncio.AbstractEventLoop,
    host: ClientHost,
    kept: Mapping[int, bytes],
    kind: int,
    client_id: int,
    body: bytes,
) -> bytes | None:
    """A worker's answer to one frame that wants one."""
    if kind == frames.CITE:
        _, delivered = _delivered(kept, (kind, client_id, body))
        if isinstance(delivered, Exception):
            raise delivered
        kind, body = frames.DELIVER, delivered
    match kind:
        case frames.JOIN:
            return host.add([load_spec(body)])[0]
        case frames.LEAVE:
            return host.remove(client_id, body.decode())
        case frames.DELIVER:
            return loop.run_until_complete(host.handle(client_id, body))
        case frames.STATE:
            return pickle.dumps(host.states([client_id]).get(ClientId(client_id)))
        case frames.RESTORE:
            host.restore({ClientId(client_id): pickle.loads(body)})
            return b""
    raise ValueError(f"frame kind {kind} for client {client_id} not understood")


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request took hold
        os._exit(0)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes from `sock`; None at end of file (the parent is gone)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    while view:
        received = sock.recv_into(view)
        if received == 0:
            return None
        view = view[received:]
    return bytes(buffer)
