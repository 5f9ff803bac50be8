"""Where a tensor came from, in the words the user wrote: moved by ``to`` (not "by detach", the
op ``nn.Parameter`` runs inside torch), loaded by ``torch.load`` or ``load_state_dict``, a batch
from the DataLoader; and the quoted code never carries the line's trailing comment."""

from __future__ import annotations

import contextlib
import inspect
import runpy
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensor_dap
from tensor_dap.agent.naming import source_line, without_comments
from tensor_dap.testing import accelerator_device


def _line_of(function, text: str) -> int:  # noqa: ANN001
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def _origins(watch, **tensors: torch.Tensor) -> dict[str, tuple[int, str]]:  # noqa: ANN001
    found = {}
    for name, tensor in tensors.items():
        prov = watch.provenance.lookup(tensor)
        found[name] = (prov.line, prov.op) if prov is not None else None
    return found


def test_parameters_moved_by_to_are_created_by_to() -> None:
    device = accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        model = nn.Linear(4, 2).to(device)
    line = _line_of(test_parameters_moved_by_to_are_created_by_to, "nn.Linear(4, 2).to(device)")
    assert _origins(watch, weight=model.weight, bias=model.bias) == {
        "weight": (line, "to"),
        "bias": (line, "to"),
    }


def test_checkpoints_and_state_dicts_say_they_were_loaded(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": nn.Linear(4, 2).state_dict(), "mean": torch.zeros(4)}, path)
    model = nn.Linear(4, 2)
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["model"])
    this = test_checkpoints_and_state_dicts_say_they_were_loaded
    assert _origins(watch, mean=checkpoint["mean"], weight=model.weight) == {
        "mean": (_line_of(this, "checkpoint = torch.load(path)"), "torch.load"),
        "weight": (_line_of(this, "model.load_state_dict("), "load_state_dict"),
    }


def test_a_batch_says_it_came_from_the_data_loader() -> None:
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        x, y = next(iter(loader))
    line = _line_of(test_a_batch_says_it_came_from_the_data_loader, "x, y = next(iter(loader))")
    assert _origins(watch, x=x, y=y) == {"x": (line, "DataLoader"), "y": (line, "DataLoader")}


def test_the_device_mismatch_message_names_the_checkpoint(tmp_path: Path) -> None:
    device = accelerator_device()
    path = tmp_path / "mean.pt"
    torch.save(torch.zeros(4), path)
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        mean = torch.load(path)
        x = torch.randn(2, 4).to(device)
        with contextlib.suppress(RuntimeError):
            x - mean  # the mean stayed on the CPU
    (finding,) = watch.findings
    this = test_the_device_mismatch_message_names_the_checkpoint
    load = _line_of(this, "mean = torch.load(path)")
    assert f"mean is on cpu (created at test_origin_messages.py:{load} by torch.load)" in (
        finding.message
    )
    assert finding.message.startswith("`x - mean`:")


def test_quoted_code_never_carries_the_trailing_comment(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text('loss = model(x).detach()  # "to save memory" # expect: grad-lost\n')
    assert source_line(str(script), 1) == "loss = model(x).detach()"
    assert without_comments('s = "#not a comment"  # a comment') == 's = "#not a comment"'
    assert without_comments("f(a,  # first\n  b)") == "f(a,\n  b)"


def test_quotes_over_several_lines_leave_their_comments_out(tmp_path: Path) -> None:
    script = tmp_path / "accumulate.py"
    script.write_text(
        "import contextlib\n"
        "import torch\n"
        "from tensor_dap.testing import accelerator_device\n"
        "w = torch.ones(1).to(accelerator_device()) * 2\n"
        "total = torch.Tensor(  # the running sum\n"
        "    [0.0])\n"
        "with contextlib.suppress(RuntimeError):\n"
        '    total = total + w  # add "w"\n'
    )
    accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        runpy.run_path(str(script))
    (finding,) = watch.findings
    assert finding.message.startswith("`total + w`: total is on cpu (created at accumulate.py:5")
    assert "by `torch.Tensor( [0.0])`)" in finding.message and "#" not in finding.message
    in_a_string = 'f("""a\n# not a comment\n""")'
    assert without_comments(f"{in_a_string}  # one") == in_a_string
