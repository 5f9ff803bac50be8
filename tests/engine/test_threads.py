"""Threads: a TorchFunctionMode sees only the thread that pushed it, so the watch pushes one in
each thread the program starts while it runs — not in the debugger's or its own threads, and
one that outlives the watch lets every op through."""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable

import torch

import tensor_dap
from tensor_dap.testing import accelerator_device


def mismatch() -> None:
    counter = torch.zeros(2)
    hits = torch.ones(2, device=accelerator_device())
    # the stand-in raises PyTorch's own error after the finding
    with contextlib.suppress(RuntimeError):
        counter + hits  # the line the finding names


MISMATCH_LINE = mismatch.__code__.co_firstlineno + 5


def in_thread(target: Callable[[], None], name: str = "worker") -> None:
    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()


def test_a_thread_started_during_the_watch_is_watched() -> None:
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        in_thread(mismatch)
    [finding] = watch.findings
    assert finding.rule == "device-mismatch"
    assert (finding.path, finding.line) == (__file__, MISMATCH_LINE)
    assert "counter is on cpu" in finding.message


def test_a_thread_that_outlives_the_watch_is_let_go() -> None:
    go, done = threading.Event(), threading.Event()

    def later() -> None:
        go.wait(30)
        mismatch()
        done.set()

    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        thread = threading.Thread(target=later)
        thread.start()
    go.set()
    assert done.wait(30)
    thread.join()
    assert watch.findings == []
    if sys.version_info >= (3, 10):
        assert threading.getprofile() is None  # the hook for new threads is gone


def test_the_debuggers_threads_are_not_watched() -> None:
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        in_thread(mismatch, name="pydevd.CheckAliveThread")
        in_thread(mismatch, name="tensor-dap-channel")
    assert watch.findings == []
