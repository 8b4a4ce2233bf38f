"""`clusterfed conformance -- CMD…`: a scripted server against a third-party
client, reporting case by case what the client did wrong.

The suite listens on a loopback port, starts the client under test with
`{address}`, `{id}` and `{token}` in CMD replaced, and plays the server of
docs/protocol.md at it: the handshake and join, one task of every kind, a
malformed frame, a message of a newer protocol version, a 2 GB frame, a
deadline (the server stops waiting and drops the connection), an idle drop,
the shutdown, and then, with the client started again, a leave. The client
plays digits client 0 of a softmax regression (`mlp`, `hidden = []`), whose
spec and samples it gets in `accepted` as it asks.

A client that dies is started again for the cases after, so each planted
fault shows in its own case. How a case asks and judges an answer's envelope
is `ScriptedServer`'s (`scripted_server.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from clusterfed.actors.runtimes.net_io import write_frame
from clusterfed.client_under_test import CLIENT, ClientUnderTest, Verdict
from clusterfed.protocol import (
    ClassHistogram,
    ClusterModel,
    DescribeTask,
    EvaluateReply,
    EvaluateTask,
    LeaveNotice,
    PeerModel,
    ProbeReply,
    ProbeTask,
    ProtocolError,
    Shutdown,
    TrainConfig,
    TrainTask,
    UpdateReply,
    encode,
)
from clusterfed.protocol.transport import Leave, encode_control
from clusterfed.scripted_server import ScriptedServer

FEATURES, CLASSES = 64, 10
WEIGHTS = CLASSES * FEATURES + CLASSES
CASES = (
    "handshake",
    "join",
    "train_task",
    "evaluate_task",
    "probe_task",
    "describe_task",
    "echoes ids",
    "keeps its sample count",
    "malformed frame",
    "newer protocol version",
    "oversized frame",
    "deadline",
    "reconnect",
    "shutdown",
    "leave",
)


class Suite(ScriptedServer):
    """The scripted server; `run(command)` plays every case once."""

    def __init__(self, command: Sequence[str], *, timeout_s: float = 30.0) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s
        self.verdicts = {case: Verdict(case) for case in CASES}
        self.client = ClientUnderTest(self.command, self.verdicts, timeout_s)
        self.spec = self.client.spec
        self._next = 0

    async def run(self) -> list[Verdict]:
        server = await self.client.listen()
        try:
            await self._play()
        finally:
            server.close()
            self.client.stop()
        return [self.verdicts[c] for c in CASES]

    # -- the cases ---------------------------------------------------------------

    async def _play(self) -> None:
        if not await self.client.start(first=True):
            return
        await self._case("train_task", self._train)
        await self._case("evaluate_task", self._evaluate)
        await self._case("probe_task", self._probe)
        await self._case("describe_task", self._describe)
        await self._case("malformed frame", self._malformed)
        await self._case("newer protocol version", self._newer_version)
        await self._case("oversized frame", self._oversized)
        await self._case("deadline", self._deadline)
        await self._case("reconnect", self._reconnect)
        await self._case("shutdown", self._shutdown)
        self.client.stop()
        if await self.client.start(first=False):
            await self._case("leave", self._leave)

    async def _case(
        self, name: str, play: Callable[[Verdict], Awaitable[None]]
    ) -> None:
        verdict = self.verdicts[name]
        if self.client.peer is None and not await self.client.start(first=False):
            verdict.fail("the client is gone and could not be started again")
            return
        try:
            await play(verdict)
        except (TimeoutError, ProtocolError, ConnectionError) as exc:
            verdict.fail(f"{type(exc).__name__}: {exc}")
            self.client.drop()

    async def _train(self, verdict: Verdict) -> None:
        task = TrainTask(
            models=(ClusterModel(cluster=0, weights=np.zeros(WEIGHTS, np.float32)),),
            config=TrainConfig(lr=0.05, momentum=0.9, batch_size=16, epochs=1),
        )
        reply = await self._exchange(verdict, task, UpdateReply)
        if reply is None:
            return
        n_train = len(self.spec.train)
        if reply.cluster != 0:
            verdict.fail(f"trained cluster {reply.cluster!r}, was sent 0")
        if reply.delta.shape != (WEIGHTS,):
            verdict.fail(f"delta of shape {reply.delta.shape}, the model has {WEIGHTS}")
        if not 1 <= reply.samples_seen <= 4 * n_train + 1:
            verdict.fail(
                f"samples_seen {reply.samples_seen} for one epoch of {n_train}"
            )
        self._count(reply.n_samples, n_train, "update_reply")

    async def _evaluate(self, verdict: Verdict) -> None:
        task = EvaluateTask(model=ClusterModel(cluster=4, weights=_weights(1)))
        reply = await self._exchange(verdict, task, EvaluateReply)
        if reply is None:
            return
        if reply.cluster != 4:
            verdict.fail(f"evaluated cluster {reply.cluster!r}, was asked 4")
        self._count(reply.n_samples, len(self.spec.test), "evaluate_reply")

    async def _probe(self, verdict: Verdict) -> None:
        peers = (
            PeerModel(owner=5, weights=_weights(2)),
            PeerModel(owner=9, weights=_weights(3)),
        )
        reply = await self._exchange(verdict, ProbeTask(models=peers), ProbeReply)
        if reply is None:
            return
        owners = [s.owner for s in reply.scores]
        if owners != [5, 9]:
            verdict.fail(f"scores for owners {owners}, was sent [5, 9]")
        self._count(reply.n_samples, len(self.spec.test), "probe_reply")

    async def _describe(self, verdict: Verdict) -> None:
        reply = await self._exchange(verdict, DescribeTask(), ClassHistogram)
        if reply is None:
            return
        if reply.client_id != CLIENT:
            verdict.fail(f"a histogram of client {reply.client_id}, it is {CLIENT}")
        if len(reply.counts) != CLASSES or sum(reply.counts) != len(self.spec.train):
            verdict.fail(
                f"{len(reply.counts)} counts summing to {sum(reply.counts)}; digits"
                f" has {CLASSES} classes and the client {len(self.spec.train)} samples"
            )

    async def _malformed(self, verdict: Verdict) -> None:
        answer = await self._ask(b"\xc1\x00 not msgpack", verdict)
        await self._expect_error(verdict, answer, "bad_message", None)

    async def _newer_version(self, verdict: Verdict) -> None:
        data = encode(
            self._envelope(
                EvaluateTask(model=ClusterModel(cluster=0, weights=_weights(1)))
            )
        )
        newer = data.replace(
            b"\xb0protocol_version\x02", b"\xb0protocol_version\x03", 1
        )
        answer = await self._ask(newer, verdict)
        await self._expect_error(
            verdict, answer, None, "protocol_version: 3 is not supported"
        )

    async def _oversized(self, verdict: Verdict) -> None:
        peer = self.client.require_peer()
        peer.writer.write((2**31).to_bytes(4, "little"))
        await peer.writer.drain()
        # A client may close on the length alone (and come back), or go on;
        # it must not wait for 2 GB, nor die.
        if not await peer.closed(10):
            verdict.fail("still waiting on a 2 GB frame after 10 s")
            self.client.drop()
        else:
            self.client.peer = None
        if not await self.client.back(verdict, "after a 2 GB frame"):
            return
        await self._answers_after(verdict)

    async def _deadline(self, verdict: Verdict) -> None:
        # The server stops waiting (a task timeout) and drops the connection
        # while the client trains; the client's reply has nowhere to go.
        peer = self.client.require_peer()
        task = TrainTask(
            models=(ClusterModel(cluster=0, weights=np.zeros(WEIGHTS, np.float32)),),
            config=TrainConfig(epochs=1),
        )
        await write_frame(peer.writer, encode(self._envelope(task)))
        self.client.drop()
        if await self.client.back(
            verdict, "after the server dropped it past a deadline"
        ):
            await self._answers_after(verdict)

    async def _reconnect(self, verdict: Verdict) -> None:
        self.client.drop()
        if await self.client.back(verdict, "after an idle drop"):
            await self._answers_after(verdict)

    async def _shutdown(self, verdict: Verdict) -> None:
        reply = await self._exchange(verdict, Shutdown(reason="end of run"), Shutdown)
        if reply is None:
            return
        peer = self.client.require_peer()
        peer.drop()
        self.client.peer = None
        with contextlib.suppress(TimeoutError):
            arrival = await asyncio.wait_for(self.client.arrivals.get(), 3)
            arrival[1].close()
            verdict.fail("connected again after its shutdown")
        if self.client.process is not None:
            try:
                code = await asyncio.to_thread(self.client.process.wait, 10)
            except subprocess.TimeoutExpired:
                verdict.fail("still running 10 s after its shutdown")
                return
            if code != 0:
                verdict.fail(f"exited with status {code} after its shutdown")

    async def _leave(self, verdict: Verdict) -> None:
        peer = self.client.require_peer()
        answer = await peer.ask(
            encode_control(Leave(reason="scenario: leave")), self.timeout_s
        )
        if answer is None:
            verdict.fail("closed the connection without a leave notice")
            return
        envelope = self._decoded(verdict, answer, "its answer to a leave")
        if envelope is None:
            return
        payload = envelope.payload
        if not isinstance(payload, LeaveNotice) or payload.client_id != CLIENT:
            verdict.fail(f"answered a leave with {payload.kind}, not its leave notice")
        if (
            envelope.sender != f"client/{CLIENT}"
            or envelope.msg_id != f"client/{CLIENT}:leave"
        ):
            verdict.fail(f"a leave notice from {envelope.sender} as {envelope.msg_id}")
        if not await peer.closed(10):
            verdict.fail("kept the connection open after leaving")

    async def _answers_after(self, verdict: Verdict) -> None:
        task = EvaluateTask(model=ClusterModel(cluster=0, weights=_weights(4)))
        before = self.verdicts["evaluate_task"].passed
        reply = await self._exchange(verdict, task, EvaluateReply)
        if reply is None and before:
            verdict.fail("no evaluation answered on the new connection")


def _weights(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.01, WEIGHTS).astype(np.float32)


def check(command: Sequence[str], timeout_s: float = 30.0) -> list[Verdict]:
    """Play every case against the client `command` starts."""
    return asyncio.run(Suite(command, timeout_s=timeout_s).run())


def report(verdicts: Sequence[Verdict]) -> str:
    """One line per case, `ok` or `FAIL` and what was wrong."""
    lines = []
    for v in verdicts:
        lines.append(f"{'ok  ' if v.passed else 'FAIL'}  {v.case}")
        lines += [f"        {p}" for p in v.problems]
    failed = sum(not v.passed for v in verdicts)
    lines.append(f"{len(verdicts) - failed} of {len(verdicts)} cases passed")
    return "\n".join(lines)


def parse_command(words: Sequence[str]) -> list[str]:
    """CMD after `--`, or one quoted string."""
    if len(words) == 1:
        return shlex.split(words[0])
    return list(words)
