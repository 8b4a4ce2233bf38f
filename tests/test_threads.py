"""A client host computes on one thread, torch's and BLAS's alike, and the
inline runtime gives this process its threads back when it closes."""

from __future__ import annotations

import asyncio

import torch
from threadpoolctl import threadpool_info, threadpool_limits

from clusterfed.actors import InlineRuntime
from clusterfed.actors.host import compute_on_one_thread


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
