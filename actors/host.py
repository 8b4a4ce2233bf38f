"""A host of client actors: the one place their objects and state live.

Every runtime hosts clients the same way, through a `ClientHost`: the inline
runtime holds one, each worker process of the local runtime holds one, each
Ray host actor wraps one. Its clients share the host's pool of scratch models
and keep everything else (trainer, privacy accountant, a faulty client's
memory) on their own objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

import torch
from threadpoolctl import threadpool_limits

from clusterfed.types import ClientId

from .client import Client, ClientState, TrainJob, keeps_state
from .cohort import CohortTask, cohort_key, train_cohort
from .compute import prepare_process
from .spec import ClientSpec, ScratchModels
from .trainer import TrainResult


def compute_on_one_thread() -> Callable[[], None]:
    """Torch's threads and the BLAS libraries' (numpy's OpenBLAS, through
    threadpoolctl) down to one in this process; returns what restores them.

    A host computes one client at a time beside the other hosts, one core
    each: a second BLAS thread only competes with another host (OpenBLAS
    spins while it waits), and a dot product summed in two halves rounds
    differently from one summed whole, so every host uses one thread for the
    same numerics in every runtime.
    """
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    blas = threadpool_limits(1)

    def restore() -> None:
        blas.restore_original_limits()
        torch.set_num_threads(torch_threads)

    return restore


class ClientHost:
    """Client actors hosted together; they serve one request at a time."""

    def __init__(self) -> None:
        self.clients: dict[int, Client] = {}
        self.models = ScratchModels()
        self._cohort = 1  # the largest `compute.cohort` of a client it took

    def add(self, specs: Sequence[ClientSpec]) -> list[bytes]:
        """Host new clients; returns the join request each of them sends."""
        joins = []
        for spec in specs:
            if spec.compute is not None:  # before the first kernel on it
                prepare_process(spec.compute.device)
            if spec.id in self.clients:
                raise ValueError(f"client {spec.id} is already hosted here")
            client = self.clients[spec.id] = Client(spec, self.models)
            self._take_cohort(spec)
            joins.append(client.join_request())
        return joins

    def update(self, spec: ClientSpec) -> None:
        """A hosted client's new spec (a drift, a straggler, a new link); it
        keeps what it remembers."""
        self._client(spec.id).update(spec)
        self._take_cohort(spec)

    def remove(self, client: int, reason: str) -> bytes:
        """Stop hosting a client; returns the leave notice it sends."""
        return self.clients.pop(client).leave_notice(reason)

    async def handle(self, client: int, data: bytes) -> bytes | None:
        """The client's reply to `data`; None if it does not answer."""
        return await self._client(client).handle(data)

    @property
    def cohort(self) -> int:
        """The most train tasks this host trains as one computation (its
        clients' `compute.cohort`: a setting of the run, the same for all);
        1: one at a time."""
        return self._cohort

    def _take_cohort(self, spec: ClientSpec) -> None:
        if spec.compute is not None:
            self._cohort = max(self._cohort, spec.compute.cohort)

    async def handle_many(
        self, requests: Sequence[tuple[int, bytes]]
    ) -> list[bytes | None | Exception]:
        """Each client's reply to its request, in order, as `handle` gives it
        (or the exception it raised: a client not hosted here).

        Train tasks a cohort can take (`Client.start_training`) train in
        cohorts of at most `cohort` tasks of one model and one config, in
        the order they came (private clients' as private cohorts,
        `cohort_dp.py`); the others are served alone, in order: FedEM's
        mixture tasks and a misbehaving client's tasks train alone. A
        client's numbers do not depend on its cohort (`cohort.py`).
        """
        replies: list[bytes | None | Exception] = [None] * len(requests)
        size = self.cohort
        jobs: dict[tuple[object, ...], list[tuple[int, Client, TrainJob]]] = {}
        tasks: dict[int, CohortTask] = {}
        alone: list[int] = []
        for i, (cid, data) in enumerate(requests):
            try:
                client = self._client(cid)
            except LookupError as exc:
                replies[i] = exc
                continue
            job = client.start_training(data) if size > 1 else None
            if isinstance(job, bytes):
                replies[i] = job
            elif job is None:
                alone.append(i)
            else:
                plan = job.plan
                tasks[i] = CohortTask(
                    client.trainer,
                    plan.chosen.weights,
                    job.config,
                    job.request.round,
                    plan.anchors,
                )
                jobs.setdefault(cohort_key(tasks[i]), []).append((i, client, job))
        for group in jobs.values():
            for first in range(0, len(group), size):
                cohort = group[first : first + size]
                outcomes: Sequence[TrainResult | Exception]
                try:
                    outcomes = train_cohort([tasks[i] for i, _, _ in cohort])
                except Exception as exc:  # each of its clients answers with it
                    outcomes = [exc] * len(cohort)
                for (i, client, job), outcome in zip(cohort, outcomes, strict=True):
                    replies[i] = client.finish_training(job, outcome)
        for i in alone:
            cid, data = requests[i]
            replies[i] = await self.clients[cid].handle(data)
        return replies

    def states(
        self, clients: Sequence[int] | None = None
    ) -> dict[ClientId, ClientState]:
        """What hosted clients keep between rounds (see `Client.state`)."""
        ids = sorted(self.clients) if clients is None else clients
        found = {
            ClientId(cid): self.clients[cid].state()
            for cid in ids
            if cid in self.clients and keeps_state(self.clients[cid].spec)
        }
        return {cid: state for cid, state in found.items() if state is not None}

    def restore(self, states: Mapping[ClientId, ClientState]) -> None:
        """Give hosted clients what `states` returned; others are not here."""
        for cid, state in states.items():
            if cid in self.clients:
                self.clients[cid].restore(state)

    def _client(self, client: int) -> Client:
        found = self.clients.get(client)
        if found is None:
            raise LookupError(f"client {client} is not hosted here")
        return found


class WaitingRequests:
    """Requests to a host that wait to be served together, so its train
    tasks can train as cohorts (`ClientHost.handle_many`): used by runtimes
    whose requests arrive as concurrent calls (inline, Ray's host actors).

    A request joins the queue, then waits for the serving lock; whichever
    request gets it first serves every request waiting then. A request
    cancelled while it waits (its timeout) leaves the queue unserved.
    """

    def __init__(self, host: ClientHost) -> None:
        self.host = host
        self._queue: list[_Waiting] = []

    @property
    def waiting(self) -> int:
        """Requests waiting now."""
        return len(self._queue)

    async def serve(
        self,
        client: int,
        data: bytes,
        lock: asyncio.Lock,
        before: Callable[[], Awaitable[None]],
    ) -> bytes | None:
        """The client's reply to `data`; `before` runs under `lock` before a
        batch is taken (a yield: the requests sent with this one queue up)."""
        mine: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        entry = (client, data, mine)
        self._queue.append(entry)
        try:
            async with lock:
                if not mine.done():
                    await before()
                    batch, self._queue = self._queue, []
                    await self._serve_all(batch)
        finally:
            if entry in self._queue:  # cancelled while it waited
                self._queue.remove(entry)
        return mine.result()

    async def _serve_all(self, batch: list[_Waiting]) -> None:
        try:
            replies = await self.host.handle_many([(c, d) for c, d, _ in batch])
        except Exception as exc:
            replies = [exc] * len(batch)
        for (_, _, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)


_Waiting = tuple[int, bytes, "asyncio.Future[bytes | None]"]
"""A request waiting to be served with others: client, bytes, its reply."""
