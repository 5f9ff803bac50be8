"""``inplace-saved`` on every tensor type: plain CPU tensors, the stand-in accelerator, wrapper
subclasses torch ships (``TwoTensor``, ``LoggingTensor``: not ours, so they cannot cooperate)
and a plain ``as_subclass`` subclass. The programs are in ``inplace_programs/``; ``kinds.py``
there makes their tensors of the type named on the command line."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tests.conftest import expected_findings

PROGRAMS = Path(__file__).parent / "inplace_programs"
_spec = importlib.util.spec_from_file_location("inplace_kinds", PROGRAMS / "kinds.py")
assert _spec is not None and _spec.loader is not None
kinds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kinds)

KINDS = kinds.KINDS
_NEEDS = {
    "two": "torch.testing._internal.two_tensor",
    "logging": "torch.testing._internal.logging_tensor",
}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param in _NEEDS:
        pytest.importorskip(_NEEDS[request.param])
    return request.param


@pytest.mark.parametrize(
    ("program", "saver"),
    [
        ("resnet_block", "ReluBackward0"),
        ("vae_reparam", "ExpBackward0"),
        ("codebook_ema", "MmBackward0"),
        ("prototypes_ema", "MmBackward0"),
        ("custom_function_saved", "which SwishFn saved for backward (SwishFnBackward)"),
    ],
)
def test_reported_at_the_in_place_line(program: str, saver: str, kind: str, check) -> None:
    script = PROGRAMS / f"{program}.py"
    run = check(script, kind)
    assert run.pairs() == expected_findings(script), run.stderr[-3000:]
    message = run.finding("inplace-saved")["message"]
    assert saver in message
    if program == "prototypes_ema" and kind == "cpu":  # the saver the backward() reached
        assert "saved for backward at prototypes_ema.py:20 (`logits = z @ prototypes.T" in message
    if program == "codebook_ema":  # reported once the backward() reached what was written
        line = script.read_text().splitlines().index("loss.backward()") + 1
        assert f"(`loss.backward()` at codebook_ema.py:{line} went through it.)" in message
    # the program's own error still reaches the user, later, at backward()
    assert "modified by an inplace operation" in run.stderr


def test_no_false_alarm(kind: str, check) -> None:
    run = check(PROGRAMS / "no_false_alarm.py", kind)
    assert run.findings == [], run.stderr[-3000:]
    assert run.returncode == 0 and "done" in run.stdout, run.stderr[-3000:]


# --- the rule against PyTorch itself: reported exactly when backward() fails ----------------
# Each scenario builds a graph, returns (loss, write); the write is the in-place op under test.

Scenario = Callable[[Callable[..., torch.Tensor]], tuple[torch.Tensor, Callable[[], Any]]]


def _leaf(make: Callable[..., torch.Tensor], *shape: int) -> torch.Tensor:
    return make(torch.randn(*shape)).requires_grad_()


def saved_output(make):
    h = torch.exp(_leaf(make, 3) * 1)
    return h.sum(), lambda: h.mul_(2)


def view_of_a_saved_output(make):
    h = torch.sigmoid(_leaf(make, 3, 2) * 1)
    v = h[0]
    return h.sum(), lambda: v.add_(1)


def saved_input(make):
    a = _leaf(make, 3) * 1
    y = a * _leaf(make, 3)
    return y.sum(), lambda: a.add_(1)


def base_of_a_saved_view(make):
    a = _leaf(make, 3, 2) * 1
    y = a[0] * _leaf(make, 2)
    return y.sum(), lambda: a.add_(1)


def sibling_view_of_a_saved_view(make):
    a = _leaf(make, 3, 2) * 1
    y = a[0] * _leaf(make, 2)
    u = a[1]
    return y.sum(), lambda: u.add_(1)


def saved_data_input(make):
    x = make(torch.randn(3))
    y = x * _leaf(make, 3)
    return y.sum(), lambda: x.add_(1)


def write_under_no_grad(make):
    h = torch.exp(_leaf(make, 3) * 1)

    def write() -> None:
        with torch.no_grad():
            h.mul_(2)

    return h.sum(), write


def write_in_inference_mode(make):
    h = torch.exp(_leaf(make, 3) * 1)

    def write() -> None:
        with torch.inference_mode():
            h.add_(1)

    return h.sum(), write


def not_saved(make):
    a = _leaf(make, 3) * 1
    y = a + 1
    return y.sum(), lambda: a.add_(1)


def product_by_a_number(make):
    out2 = F.relu(_leaf(make, 3) * 1) * 2
    return out2.sum(), lambda: out2.add_(1)


def clone_of_a_saved_output(make):
    h = torch.exp(_leaf(make, 3) * 1)
    c = h.clone()
    return h.sum(), lambda: c.add_(1)


def detach_alias(make):
    h = torch.exp(_leaf(make, 3) * 1)
    d = h.detach()
    return h.sum(), lambda: d.add_(1)


class _LossOfTheWrite:
    """The loss of a forward that goes on from the written tensor (made by the write)."""

    def __init__(self) -> None:
        self.loss: Any = None

    def backward(self) -> None:
        self.loss.backward()


def _written_then_summed(make, write_of) -> tuple[Any, Callable[[], None]]:  # noqa: ANN001
    z = _leaf(make, 2, 3) * 1
    later = _LossOfTheWrite()

    def write() -> None:
        write_of(z)
        later.loss = z.sum()

    return later, write


def operand_saved_the_target(make):
    """``z /= z.norm(dim=1, keepdim=True)``: the norm saved z, and z's graph goes on from it."""
    return _written_then_summed(make, lambda z: z.div_(z.norm(dim=1, keepdim=True)))


def operand_of_a_detached_copy(make):
    return _written_then_summed(make, lambda z: z.div_(z.detach().norm(dim=1, keepdim=True)))


def operand_that_saved_nothing_of_it(make):
    return _written_then_summed(make, lambda z: z.sub_(z.mean(dim=1, keepdim=True)))


def activation_flag_on_a_saved_output(make):
    """``F.relu(h, inplace=True)`` on a sigmoid's output, which the sigmoid saved."""
    h = torch.sigmoid(_leaf(make, 3) * 1)
    return h.sum(), lambda: F.relu(h, inplace=True)


def dropout_module_flag_on_a_saved_output(make):
    """``nn.Dropout(p, inplace=True)`` on attention weights, which the softmax saved: the
    module calls ``F.dropout(x, p, training, True)`` from torch's own code."""
    att = torch.softmax(_leaf(make, 2, 3) * 1, dim=-1)
    return att.sum(), lambda: torch.nn.Dropout(0.5, inplace=True)(att)


def dropout_flag_in_eval_mode(make):
    """In eval mode (or with ``p=0``) an in-place dropout hands its input back untouched."""
    att = torch.softmax(_leaf(make, 2, 3) * 1, dim=-1)

    def write() -> None:
        F.dropout(att, 0.5, False, True)
        torch.nn.Dropout(0.0, inplace=True)(att)

    return att.sum(), write


def activation_flag_unset(make):
    h = torch.sigmoid(_leaf(make, 3) * 1)
    return h.sum(), lambda: F.leaky_relu(h, 0.1, False)


def activation_flag_on_an_output_not_saved(make):
    """``nn.ReLU(inplace=True)`` after a layer that saved its input, not its output."""
    z = _leaf(make, 3) * 2 + 1
    return z.sum(), lambda: torch.nn.ReLU(inplace=True)(z)


SCENARIOS = [
    activation_flag_on_a_saved_output,
    dropout_module_flag_on_a_saved_output,
    dropout_flag_in_eval_mode,
    activation_flag_unset,
    activation_flag_on_an_output_not_saved,
    operand_saved_the_target,
    operand_of_a_detached_copy,
    operand_that_saved_nothing_of_it,
    saved_output,
    view_of_a_saved_output,
    saved_input,
    base_of_a_saved_view,
    sibling_view_of_a_saved_view,
    saved_data_input,
    write_under_no_grad,
    write_in_inference_mode,
    not_saved,
    product_by_a_number,
    clone_of_a_saved_output,
    detach_alias,
]


def _run(scenario: Scenario, kind: str, watched: bool) -> tuple[bool, int]:
    """(backward() failed for the write, findings)"""
    torch.manual_seed(0)
    watch = tensor_dap.watch(rules=["inplace-saved"]) if watched else contextlib.nullcontext()
    with watch as w:
        loss, write = scenario(lambda t: kinds.kind(t, kind))
        write()
        try:
            loss.backward()
            failed = False
        except RuntimeError as error:
            assert "modified by an inplace operation" in str(error)
            failed = True
    return failed, len(w.findings) if watched else 0


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_reported_exactly_when_backward_fails(scenario: Scenario, kind: str) -> None:
    failed, _ = _run(scenario, kind, watched=False)
    watched_failed, findings = _run(scenario, kind, watched=True)
    assert watched_failed == failed
    assert findings == (1 if failed else 0)


def test_one_watch_over_every_scenario_in_turn(kind: str) -> None:
    """The scenarios one after another in one watch, as a long program runs them: what the rule
    learned of the graphs before (freed since, their memory reused by later tensors) neither
    hides a write that breaks backward nor reports one that does not; a write to an unrelated
    fresh tensor before each scenario's own has the rule look at the graphs first."""
    expected = []
    for scenario in SCENARIOS:
        expected.append(_run(scenario, kind, watched=False)[0])
    torch.manual_seed(0)
    reported = []
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        for scenario in SCENARIOS:
            before = len(watch.findings)
            loss, write = scenario(lambda t: kinds.kind(t, kind))
            unrelated = torch.zeros(4)
            unrelated.add_(1.0)
            write()
            with contextlib.suppress(RuntimeError):
                loss.backward()
            reported.append(len(watch.findings) > before)
            del loss, write
    assert reported == expected


def _saved_x_written_after(replace: Callable[[torch.Tensor], None]) -> tuple[list[str], bool]:
    """``y = w * x`` saves ``x``; an unrelated write has the rule look at the graph; then
    ``replace(x)`` and ``x.mul_(2)``: (the rule's findings, whether backward() failed)."""
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        w = torch.randn(3, requires_grad=True)
        x = torch.randn(3)
        y = w * x
        unrelated = torch.zeros(3)
        unrelated.add_(1.0)
        replace(x)
        x.mul_(2)
        failed = _backward_fails(y.sum())
    return [f.message for f in watch.findings], failed


def _backward_fails(loss: torch.Tensor) -> bool:
    """Whether ``loss.backward()`` fails, for an in-place write and nothing else."""
    try:
        loss.backward()
    except RuntimeError as error:
        assert "modified by an inplace operation" in str(error)
        return True
    return False


def _new_data(x: torch.Tensor) -> None:
    x.data = torch.randn(3)


def test_a_saved_tensor_given_another_storage_is_still_matched() -> None:
    """The tensor autograd saved keeps its version counter when ``.data =`` gives it another
    storage: the write after it breaks backward and is reported."""
    messages, failed = _saved_x_written_after(_new_data)
    assert failed
    assert len(messages) == 1 and "in-place mul_ modifies x" in messages[0]


def test_a_graph_built_in_another_thread_is_looked_at() -> None:
    """Nodes built in another thread (counted from their own sequence numbers) after the rule
    looked at this thread's graph: a write to what they saved is reported."""
    import threading

    failed = False
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        w = torch.randn(3, requires_grad=True)
        first = (w * torch.randn(3)).sin().sum()
        unrelated = torch.zeros(3)
        unrelated.add_(1.0)
        built: dict[str, torch.Tensor] = {}

        def build() -> None:
            built["x"] = torch.randn(3)
            built["loss"] = (w * built["x"]).cos().sum()

        thread = threading.Thread(target=build)
        thread.start()
        thread.join()
        x, loss = built["x"], built["loss"]
        x.mul_(2)
        try:
            loss.backward()
        except RuntimeError:
            failed = True
        del first
    assert failed
    assert len(watch.findings) == 1 and watch.findings[0].rule == "inplace-saved"


def test_writes_to_fresh_tensors_do_not_walk_the_graph(kind: str, monkeypatch) -> None:  # noqa: ANN001
    """An environment's observation buffer written at each step while an episode's graph grows
    (an RL rollout): the index of saved memory answers for every tensor type — a wrapper
    subclass, as the simulated device's tensors are, by the storages it wraps — so no write
    walks the graphs (walking at each write made an RL program 3× slower under --simulate)."""
    from tensor_dap.agent.rules import inplace_saved

    walks = []
    find_saver = inplace_saved._find_saver

    def counted(phases: Any, target: Any) -> Any:
        walks.append(target)
        return find_saver(phases, target)

    monkeypatch.setattr(inplace_saved, "_find_saver", counted)
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        weight = kinds.kind(torch.randn(4), kind).requires_grad_()
        episode_loss = None
        for _ in range(12):
            observation = kinds.kind(torch.zeros(4), kind)
            observation.add_(1.0)  # a fresh buffer: no graph saved it
            step_loss = (weight * observation).sum()
            episode_loss = step_loss if episode_loss is None else episode_loss + step_loss
        episode_loss.backward()
    assert walks == [] and watch.findings == []


def test_a_module_whose_flag_writes_is_named_as_the_frame_reaches_it() -> None:
    """``nn.Dropout(inplace=True)`` after a ``Tanh`` inside an ``nn.Sequential``: the write is
    the module's, its input has no name of the user's; the module is named by its path."""
    torch.manual_seed(0)
    decoder = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Dropout(0.5, inplace=True)
    )
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        out = decoder(torch.randn(2, 3))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    (finding,) = watch.findings
    module = "decoder.2 (Dropout(p=0.5, inplace=True))"
    assert f"in-place dropout modifies the input of {module} (2, 4), which tanh saved" in (
        finding.message
    )
    assert finding.message.endswith(f"Drop inplace=True from {module}.")


def test_a_recurrence_into_a_preallocated_tensor_is_told_a_fix_that_works() -> None:
    """``h[:, t + 1] = tanh(W_x(x[:, t]) + W_h(h[:, t]))``: the statement reads what it
    writes into, so ``h = h.clone()`` before it fails the same way (a helper's p15): the
    fix reads the old tensor, or keeps the steps in a list and stacks them."""
    torch.manual_seed(0)
    w_x, w_h = torch.nn.Linear(1, 4), torch.nn.Linear(4, 4, bias=False)
    x = torch.randn(2, 5, 1)
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        h = torch.zeros(2, 6, 4)
        for t in range(5):
            h[:, t + 1] = torch.tanh(w_x(x[:, t]) + w_h(h[:, t]))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            h.pow(2).mean().backward()
    (message,) = {f.message for f in watch.findings}
    assert message.startswith("`h[:, t + 1]`: in-place __setitem__ modifies h (2, 6, 4)")
    assert message.endswith(
        "The statement reads h and writes into it: read the tensor as it was and write into a "
        "copy (h_new = h.clone(), then h_new[...] = ...h[...]...); in a loop whose steps read "
        "what the step before wrote (a recurrence), keep the steps in a list "
        "(`states.append(...)`, reading `states[-1]`) and `torch.stack(states, dim=...)` after "
        "the loop."
    )


def _write_through(alias: Callable[[torch.Tensor], torch.Tensor]) -> tuple[list[str], bool]:
    """``y = tanh(x)`` saves its output; ``alias(y).mul_(0.5)`` (a GAN's samples scaled for
    logging before the generator's backward): (the rule's findings, whether backward() failed)."""
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        x = torch.randn(4, 3, requires_grad=True)
        y = torch.tanh(x)
        samples = alias(y)
        samples.mul_(0.5)
        failed = _backward_fails(y.sum())
    return [f.message for f in watch.findings], failed


def test_a_write_through_a_data_alias_says_backward_computes_from_the_written_values() -> None:
    """``.data`` shares the memory, not the version counter: backward() raises nothing and its
    gradients come from the written values. The finding says so, not that backward() fails;
    through ``.detach()`` (the counter shared) it fails, and the finding says that."""
    found, failed = _write_through(lambda y: y.data)
    assert not failed and len(found) == 1, found
    assert "which tanh saved for backward" in found[0]
    assert "samples is a .data alias, so autograd does not see the write" in found[0]
    assert "raises no error and computes its gradients from the modified values" in found[0]
    found, failed = _write_through(lambda y: y.detach())
    assert failed and len(found) == 1, found
    assert "fails with 'modified by an inplace operation'" in found[0]
    assert ".data alias" not in found[0]


def _objectness_written(write: Callable[[torch.Tensor], None]) -> tuple[list[str], bool]:
    """A YOLO head's objectness logits ``p[..., 4]``, which the BCE-with-logits loss saves,
    then ``write(p)`` before backward (a helper's program turned them into probabilities for
    logging): (the rule's findings, whether backward() failed)."""
    with tensor_dap.watch(rules=["inplace-saved"]) as watch:
        head = nn.Conv2d(3, 2 * 6, 1)
        p = head(torch.randn(2, 3, 4, 4)).view(2, 2, 6, 4, 4).permute(0, 1, 3, 4, 2)
        loss = F.binary_cross_entropy_with_logits(p[..., 4], torch.ones(2, 2, 4, 4))
        write(p)
        failed = _backward_fails(loss)
    return [f.message for f in watch.findings], failed


def test_a_write_through_a_view_of_a_data_alias_is_told_as_unseen_with_a_fix_that_copies() -> None:
    """``p.data[..., 4].sigmoid_()``: the alias is not bound to a name, the write goes through a
    view of it. backward() raises nothing and uses the written values: the finding says so, and
    its fix makes a new tensor (``p.data[..., 4] = p.data[..., 4].sigmoid()`` would write into
    p all the same). Through ``p[..., 4]`` itself (no alias) backward() fails, and the same fix
    is given."""
    found, failed = _objectness_written(lambda p: p.data[..., 4].sigmoid_())
    assert not failed and len(found) == 1, found
    assert (
        "p.data[..., 4] is a view of a .data alias, so autograd does not see the write"
        in (found[0])
    )
    assert "Compute it out of place into a new tensor (`p.data[..., 4].sigmoid(...)`" in found[0]
    assert "= p.data[..., 4].sigmoid" not in found[0]
    found, failed = _objectness_written(lambda p: p[..., 4].sigmoid_())
    assert failed and len(found) == 1, found
    assert "fails with 'modified by an inplace operation'" in found[0]
    assert "(`p[..., 4].sigmoid(...)` leaves p as it was)" in found[0]
