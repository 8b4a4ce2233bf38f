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
    parents_end.close()  # else the parent's death would never read as EOF here
    compute_on_one_thread()
    loop = asyncio.new_event_loop()
    host = ClientHost()
    kept: dict[int, bytes] = {}
    with sock:
        while True:
            header = _read_exactly(sock, HEADER.size)
            if header is None:
                return
            kind, client_id, size = HEADER.unpack(header)
            body = _read_exactly(sock, size) if size else b""
            if body is None or kind == frames.STOP:
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
            try:
                reply = answer(loop, host, kept, kind, client_id, body)
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}".encode()
                send_frame(sock, frames.ERROR, client_id, text)
                continue
            if reply is None:  # a faulty client that does not answer
                send_frame(sock, frames.NO_REPLY, client_id, b"")
            else:
                send_frame(sock, frames.REPLY, client_id, reply)


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
        (key,) = KEY.unpack_from(body)
        if key not in kept:
            raise LookupError(f"cites request body {key}, which is not kept here")
        kind, body = frames.DELIVER, body[KEY.size :] + kept[key]
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
