"""A client host and the server compute on one thread, torch's and BLAS's
alike, and give this process its threads back when the run closes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

import clusterfed
from clusterfed.actors import InlineRuntime
from clusterfed.actors.host import compute_on_one_thread
from helpers import small_scenario


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info()}


@pytest.fixture
def two_threads() -> Iterator[None]:
    """This process on two threads, torch's and BLAS's (as on a two-core
    machine), whatever this machine has; its own setting back afterwards."""
    before = torch.get_num_threads()
    with threadpool_limits(2):
        torch.set_num_threads(2)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def test_one_thread_for_torch_and_blas_then_restored(two_threads: None) -> None:
    restore = compute_on_one_thread()
    assert torch.get_num_threads() == 1
    assert blas_threads() == {1}
    restore()
    assert torch.get_num_threads() == 2
    assert blas_threads() == {2}


def test_the_inline_runtime_computes_on_one_thread_while_it_runs(
    two_threads: None,
) -> None:
    runtime = InlineRuntime()
    asyncio.run(runtime.start())
    try:
        assert torch.get_num_threads() == 1
        assert blas_threads() == {1}
    finally:
        asyncio.run(runtime.close())
    assert torch.get_num_threads() == 2
    assert blas_threads() == {2}


def test_the_local_runtimes_server_computes_on_one_thread_then_gives_them_back(
    tmp_path: Path, two_threads: None
) -> None:
    """The local runtime's server runs in this process beside worker
    processes: between its rounds too it holds one thread, as the inline
    runtime's did, and it gives this process its threads back at the end."""
    seen: list[tuple[int, set[int]]] = []
    clusterfed.run(
        small_scenario(rounds=2),
        out=tmp_path,
        workers=2,
        on_round=lambda _: seen.append((torch.get_num_threads(), blas_threads())),
    )
    assert seen == [(1, {1}), (1, {1})]
    assert torch.get_num_threads() == 2
    assert blas_threads() == {2}
