"""``model.eval()`` under a watch behaves as without one and is told to the rules once per
switch (:mod:`tensor_dap.agent.eval_switch`)."""

from __future__ import annotations

import pickle

import torch
from torch import nn

import tensor_dap
from tensor_dap.agent import eval_switch


class _FrozenNorm(nn.Module):
    """A module overriding ``train()`` (keeps its BatchNorm in eval mode), as detection and
    fine-tuning code does."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.fc = nn.Linear(4, 2)

    def train(self, mode: bool = True) -> _FrozenNorm:
        super().train(mode)
        self.norm.eval()
        return self


def test_eval_and_train_return_the_module_and_set_every_submodule() -> None:
    model = nn.Sequential(_FrozenNorm(), nn.Dropout(0.5))
    with tensor_dap.watch():
        assert model.eval() is model
        assert not any(m.training for m in model.modules())
        assert model.train() is model
        assert model[1].training and model[0].fc.training and not model[0].norm.training
    pickle.loads(pickle.dumps(model))


def test_one_notice_per_switch_to_eval_mode_at_the_outermost_call() -> None:
    heard: list[str] = []
    subscription = eval_switch.subscribe(lambda: heard.append("eval"))
    try:
        model = nn.Sequential(_FrozenNorm(), nn.Sequential(nn.Linear(2, 2), nn.Dropout()))
        model.eval()
        model.eval()  # already in eval mode: no switch
        model.train()
        model.eval()
    finally:
        subscription.remove()
    model.train()
    model.eval()
    assert heard == ["eval", "eval"]


def test_a_failing_subscriber_does_not_reach_the_program() -> None:
    def broken() -> None:
        raise RuntimeError("a rule's bug")

    subscription = eval_switch.subscribe(broken)
    try:
        model = nn.Linear(2, 2)
        assert model.eval() is model and not model.training
    finally:
        subscription.remove()


def test_an_evaluation_run_under_a_watch_gives_the_same_outputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    expected = model.eval()(x)
    with tensor_dap.watch():
        model.train()
        got = model.eval()(x)
    assert torch.equal(expected, got)


def test_the_first_eval_does_not_import_dynamo() -> None:
    """The wrapper is hidden from dynamo only once dynamo is loaded: importing it for the first
    ``model.eval()`` cost a program a second."""
    import subprocess
    import sys

    code = (
        "import sys, torch, tensor_dap\n"
        "with tensor_dap.watch():\n"
        "    torch.nn.Linear(2, 2).eval()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


def test_a_fullgraph_compile_after_a_watch_traces_zero_grad_and_eval() -> None:
    """The wrappers stay once a watch installed them; with no watch listening they must be
    traced as torch's own methods are (``fullgraph=True`` refused a function calling
    ``model.zero_grad()`` or ``model.eval()``: the wrapper's code is in a file TorchDynamo
    skips)."""
    import subprocess
    import sys

    code = (
        "import torch, tensor_dap\n"
        "m = torch.nn.Linear(4, 1)\n"
        "x = torch.randn(3, 4)\n"
        "m(x).sum().backward()\n"
        "with tensor_dap.watch():\n"
        "    m.train()\n"
        "    m.eval()\n"
        "    m.zero_grad()\n"
        "@torch.compile(backend='eager', fullgraph=True)\n"
        "def f(x):\n"
        "    m.zero_grad()\n"
        "    m.eval()\n"
        "    return m(x) * 2\n"
        "m(x).sum().backward()\n"
        "m.train()\n"
        "print(tuple(f(x).shape), m.weight.grad, m.training)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "(3, 1) None False\n"), done.stderr[-2000:]
