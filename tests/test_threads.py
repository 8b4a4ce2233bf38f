"""A client host and the server compute on one thread, torch's and BLAS's
alike, and give this process its threads back when the run closes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from threadpoolctl import threadpool_info, threadpool_limits

import clusterfed
from clusterfed.actors import InlineRuntime
from clusterfed.actors.host import compute_on_one_thread
from helpers import small_scenario


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info()}


def test_one_thread_for_torch_and_blas_then_restored() -> None:
    with threadpool_limits(2):
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            restore = compute_on_one_thread()
            assert torch.get_num_threads() == 1
            assert blas_threads() == {1}
            restore()
            assert torch.get_num_threads() == 2
            assert blas_threads() == {2}
        finally:
            torch.set_num_threads(torch_threads)


def test_the_inline_runtime_computes_on_one_thread_while_it_runs() -> None:
    runtime = InlineRuntime()
    with threadpool_limits(2):
        before = torch.get_num_threads()
        asyncio.run(runtime.start())
        try:
            assert torch.get_num_threads() == 1
            assert blas_threads() == {1}
        finally:
            asyncio.run(runtime.close())
        assert torch.get_num_threads() == before
        assert blas_threads() == {2}


def test_the_local_runtimes_server_computes_on_one_thread_then_gives_them_back(
    tmp_path: Path,
) -> None:
    """The local runtime's server runs in this process beside worker
    processes: between its rounds too it holds one thread, as the inline
    runtime's did, and it gives this process its threads back at the end."""
    seen: list[tuple[int, set[int]]] = []
    with threadpool_limits(2):
        before = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            clusterfed.run(
                small_scenario(rounds=2),
                out=tmp_path,
                workers=2,
                on_round=lambda _: seen.append(
                    (torch.get_num_threads(), blas_threads())
                ),
            )
            assert torch.get_num_threads() == 2
            assert blas_threads() == {2}
        finally:
            torch.set_num_threads(before)
    assert seen == [(1, {1}), (1, {1})]
