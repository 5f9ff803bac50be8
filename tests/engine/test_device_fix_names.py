"""A device fix names the device the same way everywhere: the runtime ``device-mismatch``
message, the language server's quick fix for that finding and the static lints' fixes all use
the user's ``device`` variable when the file has one, else a double-quoted literal."""

from __future__ import annotations

import ast
import contextlib
import runpy
import textwrap
from pathlib import Path

from lsprotocol import types

import tensor_dap
from tensor_dap.findings import Finding, Origin, TensorInfo
from tensor_dap.lsp.code_actions import code_actions
from tensor_dap.lsp.lints import lint
from tensor_dap.lsp.store import FileData
from tensor_dap.testing import accelerator_device


def _mismatch_message(tmp_path: Path, source: str) -> str:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, contextlib.suppress(RuntimeError):
        runpy.run_path(str(script))
    (finding,) = watch.findings
    return finding.message


def test_the_runtime_message_uses_the_files_device_variable(tmp_path: Path) -> None:
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        weights = torch.ones(3, device=device)
        total = torch.zeros(3)
        total = total + weights
        """,
    )
    assert message.endswith("Create total with device=device.")
    # the static lint's fix for the same file names it the same way
    [found] = lint(
        "import torch\ndevice = torch.device('cuda')\ntotal = torch.zeros(1)\n"
        "for x in xs:\n    total += x\n"
    )
    assert found.fix_title == "Create it on the device: add `device=device`"


def test_without_a_variable_the_device_is_a_double_quoted_literal(tmp_path: Path) -> None:
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        total = torch.zeros(3)
        total = total + torch.ones(3).to(accelerator_device()) * 2
        """,
    )
    device = str(accelerator_device())
    assert message.endswith(f'Create total with device="{device}".')
    # the static lint, which cannot know the device's index, quotes it the same way
    [found] = lint(
        "import torch\nx = torch.ones(3).cuda()\nacc = torch.tensor(0.0)\n"
        "for b in bs:\n    acc = f(b) + acc\n"
    )
    assert found.fix_title == 'Create it on the device: add `device="cuda"`'


def test_the_quick_fix_for_a_finding_names_the_findings_device() -> None:
    path = "/project/train.py"
    source = "import torch\ntotal = torch.zeros(3)\ntotal = total + weights\n"
    tensors = [
        TensorInfo("total", (3,), "float32", "cpu", origin=Origin(path, 2, "zeros")),
        TensorInfo("weights", (3,), "float32", "cuda:1"),
    ]
    finding = Finding("device-mismatch", path, 3, "...", tensors)
    everything = types.Range(start=types.Position(0, 0), end=types.Position(3, 0))
    [fix] = code_actions(
        "file:///project/train.py",
        path,
        source.splitlines(),
        ast.parse(source),
        [],
        FileData(findings=[finding]),
        False,
        everything,
        [],
    )
    assert fix.title == 'Create total on the device: add `device="cuda:1"`'


def test_a_comparison_run_mirrored_names_each_operand_by_its_own_text(tmp_path: Path) -> None:
    """``a >= b`` runs as ``b.__le__(a)`` when ``b`` is of a tensor subclass (the accelerator's
    tensors here, the simulated CUDA device's): each side is still named by its own text."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        lengths = torch.tensor([3, 5, 2]).to(device)
        positions = torch.arange(6)
        mask = positions[None, :] >= lengths[:, None]
        """,
    )
    assert "positions[None, :] is on cpu" in message
    assert f"lengths[:, None] is on {accelerator_device()}" in message


def test_an_augmented_assignment_names_its_value_by_its_text(tmp_path: Path) -> None:
    """``total += loss.detach()`` into a 0-dim CPU total: the total is written, not read as a
    number (a GPU refuses it), and the value is named as written, not "operand 1"."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        total = torch.tensor(0.0)
        loss = torch.ones(4, device=device).sum()
        total += loss.detach()
        """,
    )
    assert message.startswith("`total += loss.detach()`: total is on cpu (created at script.py:")
    assert f"loss.detach() is on {accelerator_device()}" in message
    assert "Create total with device=device." in message


def test_a_factory_on_the_failing_line_is_told_its_device(tmp_path: Path) -> None:
    """``torch.arange(T)[None, :] >= lengths[:, None]``: the fix is the ``device=`` of the
    ``torch.arange`` on that very line, not a ``.to()`` of what indexing it made."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        lengths = torch.tensor([3, 5, 2]).to(device)
        mask = torch.arange(6)[None, :] >= lengths[:, None]
        """,
    )
    assert "is computed from torch.arange(...) at script.py:6: pass it device=device." in message
    assert "Move " not in message


def test_a_module_never_moved_is_told_to_move(tmp_path: Path) -> None:
    """Class weights given to a loss module built of CPU labels (``nn.CrossEntropyLoss(weight=
    weights)``), and a model never moved: their tensors move with the module, by the name the
    user's code gives it — not by making the dataset's labels on the device."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        labels = torch.tensor([0] * 7 + [1] * 2 + [2])

        def build_criterion(labels, classes):
            counts = torch.bincount(labels, minlength=classes).float()
            return nn.CrossEntropyLoss(weight=counts.sum() / (classes * counts))

        model = nn.Linear(8, 3).to(device)
        criterion = build_criterion(labels, 3)
        loss = criterion(model(torch.randn(4, 8, device=device)), labels[:4].to(device))
        """,
    )
    assert "CrossEntropyLoss.weight is on cpu" in message
    assert message.endswith(
        "CrossEntropyLoss.weight belongs to criterion, which was not moved: call "
        "criterion.to(device)."
    )
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

            def forward(self, x):
                return self.fc2(torch.relu(self.fc1(x)))

        model = Net()
        out = model(torch.randn(3, 4, device=device))
        """,
    )
    assert message.endswith(
        "Linear.weight and Linear.bias belong to model, which was not moved: call model.to(device)."
    )


def test_a_layer_made_after_the_model_moved_is_not_called_unmoved(tmp_path: Path) -> None:
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(4, 8)

            def forward(self, x):
                h = self.body(x)
                self.head = nn.Linear(8, 2)  # made at the first forward, after the move
                return self.head(h)

        model = Net().to(device)
        out = model(torch.randn(3, 4, device=device))
        """,
    )
    assert "which was not moved" not in message
    assert message.endswith("Move Linear.weight and Linear.bias to that device with .to(x.device).")


def test_a_view_of_a_factorys_tensor_written_step_by_step_is_told_its_factory(
    tmp_path: Path,
) -> None:
    """A seq2seq forward collects the decoder's steps in ``outputs = torch.zeros(...)`` (no
    ``device=``) with ``outputs[t] = output``; the loss reads ``outputs[1:].view(-1, V)``. The
    CPU comes from the ``torch.zeros``, not from the ``view``: moving the view with ``.to()``
    would leave a copy to the CPU and back at every decoder step."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        cell, out = nn.GRUCell(8, 8).to(device), nn.Linear(8, 5).to(device)
        outputs = torch.zeros(4, 2, 5)
        hidden = torch.zeros(2, 8, device=device)
        for t in range(1, 4):
            hidden = cell(torch.randn(2, 8, device=device), hidden)
            outputs[t] = out(hidden)
        trg = torch.randint(0, 5, (4, 2), device=device)
        loss = nn.functional.cross_entropy(outputs[1:].view(-1, 5), trg[1:].view(-1))
        """,
    )
    assert "outputs[1:].view(-1, 5) is on cpu (created at script.py:13 by view)" in message
    assert "is computed from torch.zeros(...) at script.py:7: pass it device=device." in message
    assert "Move " not in message


def test_a_dtype_conversion_of_a_stack_is_not_taken_for_a_factory(tmp_path: Path) -> None:
    """``torch.stack([...]).float()`` made the CPU tensor from what it stacked: it is not to be
    "created with device=" (``.float()`` takes none), nor named as a ``torch.float(...)``; a
    ``torch.zeros(...).float()`` is still its factory's tensor, told at the factory."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        x = torch.arange(4.0)
        a = torch.stack([x, torch.full_like(x, 16)]).float()
        b = torch.ones(2, 4, device=device)
        b[:1] - a[:1]
        """,
    )
    assert "torch.float(" not in message and "Create " not in message, message
    assert message.endswith("Move a[:1] to that device with .to(device)."), message
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        a = torch.zeros(2, 4).float()
        b = torch.ones(2, 4, device=device)
        b[:1] - a[:1]
        """,
    )
    assert "is computed from torch.zeros(...) at script.py:5: pass it device=device." in message


def test_labels_left_on_the_cpu_are_named_where_the_helper_is_handed_them(
    tmp_path: Path,
) -> None:
    """Batch-hard triplet loss: the labels were not moved with the batch's inputs, and the
    mismatch comes lines into the helper, in masks built from them (past what creation
    records keep): the fix is the caller's `y`, before the call."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()

        def triplet_loss(labels, emb, margin=0.3):
            dist = torch.cdist(emb, emb)
            same = labels.unsqueeze(0) == labels.unsqueeze(1)
            eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
            pos_mask = same & ~eye
            return (dist * pos_mask.float()).max(1)[0].mean() + margin

        y = torch.randperm(6)[:4].repeat_interleave(2)
        x = torch.randn(8, 3)
        x = x.to(device)
        loss = triplet_loss(y, x * 2)
        """,
    )
    assert message.endswith(
        "triplet_loss() is handed labels on cpu beside emb on "
        f"{accelerator_device()}: `y` at script.py:16 `loss = triplet_loss(y, x * 2)`. Hand it "
        "`y.to(device)` there (or move `y` with the batch's other tensors)."
    ), message


def test_a_cpu_argument_the_mismatch_does_not_come_from_is_not_blamed(tmp_path: Path) -> None:
    """``lengths`` stays on the CPU on purpose; the mismatch is a CPU network's output."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        reference = torch.nn.Linear(5, 5)

        def masked_mean(h, lengths):
            ref = reference(torch.ones(2, 5)).detach()
            return (h * ref).sum(1) / lengths.to(h.device)

        masked_mean(torch.randn(2, 5, device=device), torch.tensor([5, 3]))
        """,
    )
    assert "is handed" not in message, message
    assert message.endswith("Move ref to that device with .to(device)."), message


def test_rows_of_an_unmoved_parameter_are_not_blamed_on_the_indices(tmp_path: Path) -> None:
    """Center loss with its ``centers`` parameter left on the CPU: ``centers[labels]`` has
    gradient history, the labels handed in are not its cause (moving them would break the
    indexing); the operand itself is to move."""
    message = _mismatch_message(
        tmp_path,
        """
        import torch
        from tensor_dap.testing import accelerator_device
        device = accelerator_device()
        centers = torch.nn.Parameter(torch.randn(3, 4))

        def center_loss(feats, labels):
            c = centers[labels]
            return ((feats - c) ** 2).sum(1).mean()

        center_loss(torch.randn(5, 4, device=device), torch.tensor([0, 1, 2, 0, 1]))
        """,
    )
    assert "is handed" not in message, message
