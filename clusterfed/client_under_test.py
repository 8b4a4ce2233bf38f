"""The client under test of `clusterfed conformance`: its process, started
(again) from its command, and its connections, admitted by the server's own
handshake (`net_handshake.admit`). The cases are in `client_conformance.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clusterfed.actors.runtimes.net_handshake import Refusal, admit
from clusterfed.actors.runtimes.net_io import read_frame, write_frame
from clusterfed.actors.spec import ClientSpec
from clusterfed.protocol import JoinRequest, decode

CLIENT = 0
START_S = 60.0
"""How long a client's process may take to start and connect."""


@dataclass
class Verdict:
    """One case: whether the client passed, and what it did wrong."""

    case: str
    passed: bool = True
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.passed = False
        self.problems.append(problem)


def conformance_spec() -> ClientSpec:
    """The client the suite plays against: digits samples 0..59 to train on,
    60..79 held out, a softmax regression."""
    return ClientSpec(
        id=CLIENT,
        group=0,
        dataset="digits",
        model="mlp",
        model_params={"hidden": []},
        train=list(range(60)),
        test=list(range(60, 80)),
        seed=0,
    )


class Peer:
    """One admitted connection of the client under test."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    async def ask(self, body: bytes, timeout: float) -> bytes | None:
        """Send a frame; the client's next frame, None if it closed."""
        await write_frame(self.writer, body)
        return await read_frame(
            self.reader, header_timeout=timeout, body_timeout=timeout
        )

    async def closed(self, timeout: float) -> bool:
        """Whether the client closes the connection within `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            pass
        return True

    def drop(self) -> None:
        self.writer.close()


class ClientUnderTest:
    """The client's process and its current connection (`peer`).

    Args:
        command: starts the client; `{address}`, `{id}`, `{token}` replaced.
        verdicts: the suite's verdicts; "handshake" and "join" are judged here.
        timeout_s: how long the client may take to connect again.
    """

    def __init__(
        self,
        command: Sequence[str],
        verdicts: Mapping[str, Verdict],
        timeout_s: float,
    ) -> None:
        self.command = list(command)
        self.verdicts = verdicts
        self.timeout_s = timeout_s
        self.spec = conformance_spec()
        self.token = secrets.token_hex(16)
        self.arrivals: asyncio.Queue[
            tuple[asyncio.StreamReader, asyncio.StreamWriter]
        ] = asyncio.Queue()
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.peer: Peer | None = None

    async def listen(self) -> asyncio.Server:
        """Listen on a free loopback port for the client's connections."""
        server = await asyncio.start_server(self._arrive, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        self.address = f"{host}:{port}"
        return server

    async def _arrive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self.arrivals.put((reader, writer))

    def require_peer(self) -> Peer:
        if self.peer is None:
            raise ConnectionResetError("the client is not connected")
        return self.peer

    def drop(self) -> None:
        if self.peer is not None:
            self.peer.drop()
            self.peer = None

    async def back(self, verdict: Verdict, when: str) -> bool:
        """Wait for the client to connect again and pass the handshake."""
        self.drop()
        if self.process is not None:
            # A client that dies on what it was sent dies at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self.process.wait, 1)
        if self.process is not None and self.process.poll() is not None:
            verdict.fail(f"died {when} (exit status {self.process.returncode})")
            self.process = None
            return False
        if not await self.admitted():
            verdict.fail(f"did not connect again {when}")
            return False
        return True

    async def start(self, *, first: bool) -> bool:
        """Start the client (again) and admit its connection."""
        self.stop()
        words = [
            w.format(address=self.address, id=CLIENT, token=self.token)
            for w in self.command
        ]
        self.process = subprocess.Popen(
            words, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        return await self.admitted(record=first, within=START_S)

    async def admitted(self, record: bool = False, within: float = 0) -> bool:
        handshake, join = self.verdicts["handshake"], self.verdicts["join"]
        within = within or self.timeout_s
        try:
            reader, writer = await asyncio.wait_for(self.arrivals.get(), within)
        except TimeoutError:
            if record:
                handshake.fail(f"the client did not connect within {within} s")
            return False

        async def spec_of(client: int) -> ClientSpec | None:
            return self.spec if client == CLIENT else None

        try:
            admitted = await admit(reader, writer, {CLIENT: self.token}, spec_of)
        except Refusal as exc:
            handshake.fail(str(exc))
            writer.close()
            return False
        joined = decode(admitted.join).payload
        assert isinstance(joined, JoinRequest)
        if (joined.n_train, joined.n_test) != (
            len(self.spec.train),
            len(self.spec.test),
        ):
            join.fail(
                f"joined with n_train {joined.n_train}, n_test {joined.n_test};"
                f" it holds {len(self.spec.train)} and {len(self.spec.test)}"
            )
        self.peer = Peer(reader, writer)
        return True

    def stop(self) -> None:
        self.drop()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None
