"""The operators' fast path: ``a - b`` and friends skip the mode's dispatch while a watch runs,
yet every rule sees them exactly as through the mode, and ``torch.Tensor`` is given back as it
was."""

from __future__ import annotations

import contextlib
import gc
import pickle
import sys
import threading
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode

import tensor_dap
from tensor_dap.agent import native, operator_shadows
from tensor_dap.testing import accelerator_device

#: every test here runs twice: with the engine's per-op path in C, then in Python
pytestmark = pytest.mark.usefixtures("engine_path")


def shadowed(name: str) -> bool:
    ours = operator_shadows._saved.get(name, (None, None))[1]
    return ours is not None and torch.Tensor.__dict__.get(name) is ours


def own_operators() -> dict[str, object]:
    """What ``torch.Tensor`` itself defines under the shadowed names (most are inherited)."""
    return {name: torch.Tensor.__dict__.get(name) for name in operator_shadows.OPERATORS}


def test_operators_are_shadowed_while_a_watch_runs_and_given_back() -> None:
    operator_shadows.release()
    before = own_operators()
    outer = tensor_dap.watch(rules=["broadcast"])
    with outer:
        assert shadowed("__sub__")
        with tensor_dap.watch(rules=["broadcast"]):
            pass
        # the inner watch stopping leaves the outer one its fast path
        assert shadowed("__sub__")
    # C shadows stay (no type modification per watch), Python ones go with the last watch
    assert shadowed("__sub__") is native.enabled
    assert operator_shadows.release()
    assert own_operators() == before
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__


def test_shadows_left_after_a_watch_act_as_the_originals() -> None:
    """No rule runs once the watch stopped, and a user's mode sees the operators as ever."""
    x, y = torch.ones(4), torch.ones(4, 1)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        pass
    seen = []

    class Recording(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Recording():
        out = x - y
    assert seen == [torch._C.TensorBase.sub] and out.shape == (4, 4)
    with torch._C.DisableTorchFunction():
        assert (x * 2).tolist() == [2.0] * 4
    assert watch.findings == [] and torch._C._len_torch_function_stack() == 0


def test_many_watches_modify_torch_tensor_once() -> None:
    """Each install modifies ``torch.Tensor``; from Python 3.13 a class modified ~1000 times
    loses its attribute cache for good, so repeated watches must not reinstall each time (C
    shadows stay from the first watch; Python ones after a few, on Python 3.13+)."""
    watches = 40
    installs = set()
    for _ in range(watches):
        with tensor_dap.watch(rules=["broadcast"]):
            installs.add(torch.Tensor.__dict__["__add__"])
            assert torch.ones(2) + 1 is not None
    if native.enabled:
        assert len(installs) == 1
        assert torch.Tensor.__dict__["__add__"] in installs  # kept after the last watch
    elif operator_shadows._PYTHON_REINSTALLS is not None:
        assert len(installs) == operator_shadows._PYTHON_REINSTALLS
        assert torch.Tensor.__dict__["__add__"] in installs
    else:  # before 3.13 nothing is lost by reinstalling: the originals come back each time
        assert len(installs) == watches
        assert torch.Tensor.__dict__.get("__add__") not in installs


def test_nothing_shadowed_without_rules() -> None:
    before = own_operators()
    with tensor_dap.watch(rules=[]):
        assert own_operators() == before


def test_operators_skip_the_modes_dispatch(monkeypatch) -> None:
    """The point of the fast path: ``a - b`` never reaches ``__torch_function__``."""
    from tensor_dap.agent.mode import WatchMode

    dispatched = []
    through_mode = WatchMode.__torch_function__

    def spy(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        dispatched.append(func.__name__)
        return through_mode(self, func, types, args, kwargs)

    monkeypatch.setattr(WatchMode, "__torch_function__", spy)
    x, y = torch.ones(4), torch.ones(4, 1)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        x - y
        x += 2.0
        torch.sub(x, y)
    assert dispatched == ["sub"]  # torch.sub only
    # and the rules ran on the fast path (torch.sub's finding is placed in the spy's frame)
    assert (
        watch.findings[0].line
        == test_operators_skip_the_modes_dispatch.__code__.co_firstlineno + 14
    )


def test_an_operator_and_its_function_give_the_same_finding() -> None:
    x, y = torch.ones(4), torch.ones(4, 1)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        by_operator = x - y
        by_function = torch.sub(x, y)
    assert torch.equal(by_operator, by_function)
    first, second = watch.findings
    assert second.line == first.line + 1
    assert first.message.startswith("`x - y`: x (4,), y (4, 1) broadcast to (4, 4)")
    assert second.message.startswith("`torch.sub(x, y)`: x (4,), y (4, 1) broadcast to (4, 4)")


def test_provenance_of_an_operator_result_names_the_function() -> None:
    """``a * 2`` is recorded as ``mul``, as the mode names it."""
    device = accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        part = torch.ones(2, device=device, requires_grad=True) * 2
        total = torch.zeros(2)
        with contextlib.suppress(RuntimeError):
            total += part
    [finding] = watch.findings
    assert (
        finding.line
        == test_provenance_of_an_operator_result_names_the_function.__code__.co_firstlineno + 7
    )
    assert f"part is on {device}" in finding.message
    assert "by mul)" in finding.message


def test_in_place_operators_run_the_rules() -> None:
    w = torch.ones(3, requires_grad=True)
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        h = w * 1
        s = h.sigmoid()  # saves its result for backward
        s *= 2  # the in-place write under test
    [finding] = watch.findings
    assert finding.rule == "inplace-saved"
    assert "SigmoidBackward0" in finding.message


def test_torch_functions_disabled_means_no_rule() -> None:
    x, y = torch.ones(4), torch.ones(4, 1)
    with tensor_dap.watch(rules=["broadcast"]) as watch, torch._C.DisableTorchFunction():
        x - y
    assert watch.findings == []


def test_a_thread_started_before_the_watch_is_not_checked() -> None:
    x, y = torch.ones(4), torch.ones(4, 1)
    start, done = threading.Event(), threading.Event()
    results = []

    def work() -> None:
        start.wait(30)
        results.append(x - y)
        done.set()

    thread = threading.Thread(target=work)
    thread.start()
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        start.set()
        assert done.wait(30)
    thread.join()
    assert watch.findings == []
    assert results[0].shape == (4, 4)


def test_a_users_mode_above_the_watch_sees_operators_first() -> None:
    seen = []

    class Recording(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    x, y = torch.ones(4), torch.ones(4, 1)
    with tensor_dap.watch(rules=["broadcast"]) as watch, Recording():
        x - y
    assert seen == ["sub"]
    [finding] = watch.findings
    assert finding.rule == "broadcast"


def test_a_subclass_still_gets_its_torch_function() -> None:
    calls = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
            calls.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs or {})

    t = torch.ones(2).as_subclass(Logged)
    with tensor_dap.watch(rules=["broadcast"]):
        out = t * 2
        smaller = t < 3
    assert type(out) is Logged and type(smaller) is Logged
    assert {"mul", "lt"} <= set(calls)


@pytest.mark.parametrize(
    "operation",
    [
        lambda: torch.ones(2) @ torch.ones(3),
        lambda: torch.ones(2) + "text",
        lambda: torch.ones(2)[5],
    ],
    ids=["matmul", "unsupported-operand", "index"],
)
def test_errors_come_through_unchanged(operation) -> None:  # noqa: ANN001
    with pytest.raises(Exception) as plain:
        operation()
    with tensor_dap.watch() as watch, pytest.raises(Exception) as watched:
        operation()
    assert watch.findings == []
    assert torch._C._len_torch_function_stack() == 0
    assert type(watched.value) is type(plain.value)
    assert str(watched.value) == str(plain.value)


class Other:
    """Not a tensor: ``tensor + Other()`` is answered by ``Other.__radd__``."""

    def __radd__(self, other: object) -> str:
        return "radd"


def test_an_operand_torch_declines_runs_no_rule() -> None:
    """Torch answers NotImplemented without running any op; no rule may see one."""
    w = torch.ones(3, requires_grad=True)
    with tensor_dap.watch(rules="all") as watch:
        s = (w * 1).sigmoid()  # saves s for backward: an in-place write on s would be reported
        assert (s + Other()) == "radd"
        s += Other()
        assert s == "radd"
        t = torch.ones(3)
        with pytest.raises(TypeError):
            t += "text"
    assert watch.findings == []


def test_a_number_torch_declines_is_not_counted_as_an_op() -> None:
    """``t @ 2``: the operand is a number the fast path takes, torch answers NotImplemented
    and Python raises; the line ran no op, so it is not counted as one."""
    t = torch.ones(3)
    with pytest.raises(TypeError) as plain:
        t @ 2
    with tensor_dap.watch() as watch, pytest.raises(TypeError) as watched:
        t @ 2
    assert str(watched.value) == str(plain.value)
    line = watched.traceback[-1].lineno + 1  # (1-based)
    code = test_a_number_torch_declines_is_not_counted_as_an_op.__code__
    assert watch.line_hits(code, line) == 0
    assert watch.findings == []


def test_keyword_arguments_of_an_operator_pass_through() -> None:
    t, u = torch.ones(2), torch.ones(2)
    plain = t.__add__(u, alpha=2)
    with tensor_dap.watch(rules=["broadcast"]):
        watched = t.__add__(u, alpha=2)
    assert torch.equal(plain, watched)


class Interrupt(Exception):
    pass


def interrupt_after_pop(frame, event, arg):  # noqa: ANN001
    """A profile hook raising just as the fast path's pop returns: where Ctrl-C can land."""
    if event == "c_return" and arg is torch._C._pop_torch_function_stack:
        sys.setprofile(None)
        raise Interrupt


class PassThroughMode(TorchFunctionMode):
    """A user's own mode, doing nothing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return func(*args, **(kwargs or {}))


def test_an_interrupt_between_pop_and_push_keeps_the_watch() -> None:
    if native.enabled:
        pytest.skip("in C the pop returns to C: no interrupt can land before the mode is held")
    x, y = torch.ones(4), torch.ones(4, 1)
    with PassThroughMode() as users, tensor_dap.watch(rules=["broadcast"]) as watch:
        sys.setprofile(interrupt_after_pop)
        with pytest.raises(Interrupt):
            x + y
        sys.setprofile(None)
        stack = [torch._C._get_function_stack_at(i) for i in range(2)]
        assert stack == [users, watch._mode]
        x - y  # still watched: the one finding
    here = test_an_interrupt_between_pop_and_push_keeps_the_watch.__code__.co_firstlineno
    assert [f.line for f in watch.findings] == [here + 11]
    assert torch._C._len_torch_function_stack() == 0


def test_stopping_the_watch_leaves_a_mode_pushed_after_it() -> None:
    watch = tensor_dap.watch(rules=["broadcast"])
    watch.start()
    later = PassThroughMode()
    later.__enter__()
    watch.stop()
    assert torch._C._len_torch_function_stack() == 1
    assert torch._C._get_function_stack_at(0) is later
    later.__exit__(None, None, None)


def test_a_patch_made_during_the_watch_survives_it() -> None:
    original = torch.Tensor.__mul__

    def patched(self, other):  # noqa: ANN001
        return original(self, other)

    try:
        with tensor_dap.watch(rules=["broadcast"]):
            torch.Tensor.__mul__ = patched
        assert torch.Tensor.__dict__["__mul__"] is patched
    finally:
        del torch.Tensor.__mul__
    assert torch.Tensor.__mul__ is torch._C.TensorBase.__mul__


def test_torch_tables_and_pickle_still_know_the_operators() -> None:
    with tensor_dap.watch(rules=["broadcast"]):
        assert pickle.loads(pickle.dumps(torch.Tensor.__add__)) is torch.Tensor.__add__
        assert torch.Tensor.__neg__.__name__ == "__neg__"
        assert torch.overrides.resolve_name(torch.Tensor.__add__) == "torch.Tensor.__add__"
        assert torch.overrides.is_tensor_method_or_property(torch.Tensor.__mul__)
    assert torch.overrides.resolve_name(torch.Tensor.__add__) == "torch.Tensor.__add__"
    assert torch.overrides.is_tensor_method_or_property(torch.Tensor.__mul__)
    assert torch.overrides.resolve_name(torch._C.TensorBase.__add__) == "torch.Tensor.__add__"


def test_a_stopped_watch_is_let_go() -> None:
    """The modes tracked per thread (to recover from an interrupt) do not keep it alive."""
    watch = tensor_dap.watch(rules=["broadcast"])
    with watch:
        thread = threading.Thread(target=lambda: torch.ones(2) + 1)
        thread.start()
        thread.join()
        assert len(operator_shadows._pushed) == 2  # this thread's mode and the worker's
    ref = weakref.ref(watch)
    del watch
    gc.collect()
    assert ref() is None
    assert operator_shadows._pushed == {}


def test_torch_compile_runs_under_the_watch() -> None:
    """dynamo inlines the mode's ``__torch_function__`` (Python) or calls it (C) and guards on
    what it reads; either way the compiled function runs and gives the plain result."""

    def fn(x, y):  # noqa: ANN001, ANN202
        return (x + y) * torch.sin(y) - x

    x, y = torch.ones(3), torch.full((3,), 2.0)
    with tensor_dap.watch(rules=["broadcast"]):
        compiled = torch.compile(fn, backend="eager")(x, y)
    assert torch.equal(compiled, fn(x, y))


def test_calling_the_modes_torch_function_directly_takes_any_sequence_and_mapping() -> None:
    """As ``func(*args, **kwargs)`` would: a list of arguments, a read-only mapping of keywords."""
    from types import MappingProxyType

    a = torch.ones(3)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        mode = watch._mode
        out = mode.__torch_function__(torch.add, (), [a, a], MappingProxyType({"alpha": 3}))
    assert out.tolist() == [4.0, 4.0, 4.0]


class _UnhashableMeta(type):
    def __hash__(cls) -> int:
        raise RuntimeError("unhashable class")


class _Unhashable(metaclass=_UnhashableMeta):
    def __radd__(self, other):  # noqa: ANN001, ANN204
        return "radd"


def test_an_operand_whose_type_cannot_be_hashed_raises_its_own_error() -> None:
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        with pytest.raises(RuntimeError, match="unhashable class"):
            torch.ones(3) + _Unhashable()
        assert torch._C._get_function_stack_at(0) is watch._mode
    assert torch._C._len_torch_function_stack() == 0


def test_an_operand_the_fast_path_declines_is_placed_at_the_users_line() -> None:
    """``a * np.float64(2)`` goes the original way, through the mode: its provenance still names
    the user's line, not the shadow's frame."""
    np = pytest.importorskip("numpy")
    a = torch.ones(3)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        for _ in range(20):
            a + np.float64(1.0)
        y = a * np.float64(2.0)
        prov = watch.provenance.lookup(y)
    here = test_an_operand_the_fast_path_declines_is_placed_at_the_users_line.__code__
    assert prov is not None and (prov.line, prov.op) == (here.co_firstlineno + 8, "mul")
