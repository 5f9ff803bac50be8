"""The static lints as pure functions: what each flags, with its fix, and the correct idioms
that none may flag."""

from __future__ import annotations

import textwrap

import pytest

from tensor_dap.lsp.lints import Edit, lint

HEADER = "import torch\ndevice = torch.device('cuda')\n"


def lints(body: str) -> list[tuple[str, int, int, int, int]]:
    return [(f.code, f.line, f.col, f.end_line, f.end_col) for f in lint(textwrap.dedent(body))]


def test_cpu_accumulator_with_its_fix() -> None:
    source = HEADER + "total = torch.zeros(1)\nfor x in xs:\n    total += model(x)\n"
    [found] = lint(source)
    assert (found.code, found.line, found.col, found.end_col) == ("cpu-accumulator", 3, 8, 22)
    assert found.edits == (Edit(3, 21, 3, 21, ", device=device"),)
    legacy = HEADER + "loss = torch.Tensor([0.0]).float()\nwhile True:\n    loss = loss + f(x)\n"
    [found] = lint(legacy)
    assert found.edits == (Edit(3, 13, 3, 19, "tensor"), Edit(3, 25, 3, 25, ", device=device"))
    scalar = "import torch\nx = torch.ones(3).cuda()\nacc = torch.tensor(0.0)\nfor b in bs:\n"
    [found] = lint(scalar + "    acc = f(b) + acc\n")
    assert found.edits == (Edit(3, 22, 3, 22, ', device="cuda"'),)


def test_load_without_map_location() -> None:
    [found] = [
        f
        for f in lint("import torch\nstate = torch.load(path)\n")
        if f.code != "load-without-weights-only"
    ]
    assert (found.code, found.line, found.col, found.end_col) == (
        "load-without-map-location",
        2,
        8,
        24,
    )
    assert found.edits == (Edit(2, 23, 2, 23, ', map_location="cpu"'),)


def test_missing_zero_grad_with_its_fix() -> None:
    source = """\
    for epoch in range(3):
        for x, y in batches:
            loss = f(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
    """
    [found] = lint(textwrap.dedent(source))
    assert (found.code, found.line, found.col, found.end_col) == ("missing-zero-grad", 5, 8, 18)
    assert found.edits == (Edit(3, 0, 3, 0, "        opt.zero_grad()\n"),)
    scaler = "for x in xs:\n    scaler.scale(f(x)).backward()\n    scaler.step(optimizer)\n"
    [found] = lint(scaler)
    assert found.edits == (Edit(2, 0, 2, 0, "    optimizer.zero_grad()\n"),)


def test_data_writes_with_their_fixes() -> None:
    source = """\
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)  # step
        p.data -= lr * p.grad
        p.data = p.data * 0.5
    """
    found = lint(textwrap.dedent(source))
    assert [(f.code, f.line) for f in found] == [("data-write", 2), ("data-write", 3)] + [
        ("data-write", 4)
    ]
    assert [f.edits for f in found] == [
        (Edit(2, 4, 2, 34, "with torch.no_grad():\n        p.add_(p.grad, alpha=-lr)"),),
        (Edit(3, 4, 3, 25, "with torch.no_grad():\n        p -= lr * p.grad"),),
        (Edit(4, 4, 4, 25, "with torch.no_grad():\n        p.copy_(p.data * 0.5)"),),
    ]


def test_leaf_rebound() -> None:
    source = """\
    import torch
    w = torch.randn(3, requires_grad=True)
    for _ in range(10):
        loss = (w * x).sum()
        loss.backward()
        w = w - lr * w.grad
    """
    assert lints(source) == [("leaf-rebound", 6, 4, 6, 23)]


@pytest.mark.parametrize(
    "source",
    [
        # python-number accumulators, and accumulators made on the device
        "total_loss = 0.0\nfor x in xs:\n    total_loss += loss.item()\n",
        "total = torch.zeros(1)\nfor x in xs:\n    total += loss.item()\n",
        "total = torch.zeros(1, device=device)\nfor x in xs:\n    total += model(x)\n",
        "total = torch.zeros(1).to(device)\nfor x in xs:\n    total = total + model(x)\n",
        "total = torch.zeros(1)\nfor x in xs:\n    total += 1\n",
        # a CPU-only file: accumulating on the CPU is right
        "import torch\ntotal = torch.zeros(1)\nfor x in xs:\n    total += model(x)\n",
        'state = torch.load(path, map_location="cpu", weights_only=True)\n',
        "state = torch.load(path, device, weights_only=True)\n",
        "state = torch.load(path, **kwargs)\n",
        # gradient accumulation: zero_grad under an if
        "for i, (x, y) in enumerate(loader):\n"
        "    (f(model(x), y) / k).backward()\n"
        "    if (i + 1) % k == 0:\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad(set_to_none=True)\n",
        "for x in xs:\n    model.zero_grad()\n    f(x).backward()\n    opt.step()\n",
        "for x in xs:\n    for p in ps:\n        p.grad = None\n"
        "    f(x).backward()\n    opt.step()\n",
        "for x in xs:\n    f(x).backward()\n    opt.step(closure)\n",
        # backward and step in a helper: not this loop's business
        "for x in xs:\n    train_step(x)\n    scheduler.step()\n",
        "with torch.no_grad():\n    w -= lr * w.grad\n",
        "w = torch.randn(3, requires_grad=True)\nfor _ in r:\n"
        "    f(w).backward()\n    with torch.no_grad():\n        w -= lr * w.grad\n",
        "w = torch.randn(3, requires_grad=True)\nw = w.cuda()\nw = w + 1\n",
        "x = p.data.clone()\n",
        "n = p.data.norm()\n",
        "with torch.no_grad():\n    p.data.mul_(0.5)\n",
        "p.grad.data.zero_()\n",
        "def broken(:\n    p.data = 1\n",
    ],
)
def test_correct_idioms_stay_clean(source: str) -> None:
    assert lint(source if source.startswith("import") else HEADER + source) == []


def severities(source: str) -> list[tuple[str, int, str]]:
    from tensor_dap.lsp.lints import severity

    return [(f.code, f.line, severity(f)) for f in lint(textwrap.dedent(source))]


@pytest.mark.parametrize(
    "source",
    [
        # a Dataset's own attribute named `data`: not Tensor.data
        """\
        class Pairs(torch.utils.data.Dataset):
            def __init__(self, path):
                self.data = [line.split() for line in open(path)]
            def shuffle(self):
                self.data = sorted(self.data)
        """,
        "config.data = 'cifar10'\n",
        "record.data = {'x': 1}\n",
        "self.data += [x]\n",
    ],
)
def test_data_that_is_not_tensor_data_stays_clean(source: str) -> None:
    assert lint(HEADER + textwrap.dedent(source)) == []


def test_data_writes_while_building_the_model_are_hints() -> None:
    source = """\
    import torch

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(4, 4)
            self.head.weight.data.zero_()
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, torch.nn.Linear):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if module.bias is not None:
                    module.bias.data.zero_()

    def init_weights(m):
        m.bias.data.fill_(0.01)

    def fill(m):
        m.weight.data.uniform_(-0.1, 0.1)

    net.apply(fill)
    """
    found = lint(textwrap.dedent(source))
    assert severities(source) == [
        ("data-write", 7, "hint"),
        ("data-write", 12, "hint"),
        ("data-write", 14, "hint"),
        ("data-write", 17, "hint"),
        ("data-write", 20, "hint"),
    ]
    assert "harmless here, since no autograd graph holds the tensor yet" in found[0].message
    assert "matter when a backward later runs" in found[0].message


def test_data_writes_warn_only_between_forward_and_backward() -> None:
    source = """\
    import torch
    for x, y in loader:
        loss = f(model(x), y)
        for name, p in model.named_parameters():
            p.data.clamp_(-1, 1)
        model.fc.weight.data.mul_(0.5)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        w.data = w.data * 0.5
    for real in critic_loader:
        for p in critic.parameters():
            p.data.clamp_(-0.01, 0.01)
        critic(real).mean().backward()
    """
    found = lint(textwrap.dedent(source))
    assert severities(source) == [
        ("data-write", 5, "warning"),  # saved by the forward, backpropagated after
        ("data-write", 6, "warning"),
        ("data-write", 9, "hint"),  # a manual step: backward() freed the graph
        ("data-write", 10, "hint"),  # w's kind is unknown here
        ("data-write", 13, "hint"),  # WGAN's clipping: before any forward
    ]
    assert "a backward through values saved before the write" in found[0].message
    assert "harmless here: no backward is pending" in found[2].message


def test_load_without_map_location_is_a_hint_where_another_device_is_plausible() -> None:
    source = "import torch\nmodel.load_state_dict(torch.load(args.checkpoint, weights_only=True))\n"
    [found] = lint(source)
    assert found.code == "load-without-map-location"
    from tensor_dap.lsp.lints import severity

    assert severity(found) == "hint"
    assert "matters when the file was saved on a device this machine lacks" in found.message
    # a script that saves and loads its own file loads on the device it saved from
    round_trip = "import torch\ntorch.save(model, args.save)\nmodel = torch.load(args.save)\n"
    assert [f.code for f in lint(round_trip)] == ["load-without-weights-only"]


def test_ignore_comments_silence_their_line() -> None:
    from tensor_dap.lsp.lints import ignore_edit

    body = "for p in model.parameters():\n    p.data.add_(p.grad)\n"
    [found] = lint(body)
    assert ignore_edit(found, body.splitlines()) == Edit(
        2, 23, 2, 23, "  # tensor-dap: ignore[data-write]"
    )
    silenced = [
        "    p.data.add_(p.grad)  # tensor-dap: ignore[data-write]\n",
        "    p.data.add_(p.grad)  # tensor-dap: ignore\n",
        "    p.data.add_(p.grad)  # step  #tensor-dap:ignore[missing-zero-grad, data-write]\n",
    ]
    for line in silenced:
        assert lint(body.splitlines(keepends=True)[0] + line) == [], line
    other = body.splitlines(keepends=True)[0] + "    p.data.add_(p.grad)  # tensor-dap: ignore[x]\n"
    [found] = lint(other)
    # a comment naming another code gets this one added to it
    assert ignore_edit(found, other.splitlines()) == Edit(2, 47, 2, 47, ", data-write")


def test_plain_tensor_attribute_is_registered_as_a_buffer_by_its_fix() -> None:
    source = """\
import torch
from torch import nn
device = torch.device("cuda")
class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.mask = torch.tril(torch.ones(n, n))
    def forward(self, att):
        return att.masked_fill(self.mask == 0, 0.0)
"""
    [found] = lint(source)
    assert (found.code, found.line, found.col) == ("plain-tensor-attribute", 7, 8)
    assert "`model.to(device)` moves parameters and buffers, not it" in found.message
    assert found.fix_title == 'Register it: `self.register_buffer("mask", ..., persistent=False)`'
    line = source.splitlines()[6]
    for edit in sorted(found.edits, key=lambda e: e.col, reverse=True):
        line = line[: edit.col] + edit.text + line[edit.end_col :]
    assert line == (
        '        self.register_buffer("mask", torch.tril(torch.ones(n, n)), persistent=False)'
    )
    # on the CPU alone (no accelerator in the file) nothing goes wrong: no finding
    assert lint(source.replace('device = torch.device("cuda")\n', "")) == []


def test_plain_tensor_attribute_meant_to_be_learned_is_made_a_parameter_by_its_fix() -> None:
    """ViT's ``cls_token`` without ``nn.Parameter``: as a buffer it would move but never learn;
    so would a tensor made with ``requires_grad=True`` or filled by ``nn.init``. minGPT's causal
    mask (named ``bias``) stays a buffer."""
    source = """\
import torch
from torch import nn
device = torch.device("cuda")
class ViT(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cls_token = torch.zeros(1, 1, dim)
        self.scale = torch.ones(dim, requires_grad=True)
        self.gamma = torch.empty(dim)
        nn.init.normal_(self.gamma)
        self.bias = torch.tril(torch.ones(dim, dim))
    def forward(self, x):
        return (x + self.cls_token) * self.scale * self.gamma @ self.bias
"""
    found = {f.line: f for f in lint(source)}
    assert sorted(found) == [7, 8, 9, 11]
    cls_token = found[7]
    assert "`model.parameters()` leaves it out, so the optimizer never trains it" in (
        cls_token.message
    )
    assert cls_token.fix_title == "Make it a parameter: `self.cls_token = nn.Parameter(...)`"
    line = source.splitlines()[6]
    for edit in sorted(cls_token.edits, key=lambda e: e.col, reverse=True):
        line = line[: edit.col] + edit.text + line[edit.end_col :]
    assert line == "        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))"
    assert found[8].fix_title == "Make it a parameter: `self.scale = nn.Parameter(...)`"
    assert found[9].fix_title == "Make it a parameter: `self.gamma = nn.Parameter(...)`"
    assert found[11].fix_title is not None and "register_buffer" in found[11].fix_title
    # token ids and a table filled through a slice are no learned tensors: buffers
    ids = source.replace("torch.zeros(1, 1, dim)", "torch.zeros(1, 1, dtype=torch.long)")
    assert "register_buffer" in ({f.line: f for f in lint(ids)}[7].fix_title or "")
    filled = source.replace(
        "        self.scale = torch.ones(dim, requires_grad=True)\n",
        "        self.scale = torch.ones(dim)\n        self.cls_token[0, 0, 0::2] = 1.0\n",
    )
    assert "register_buffer" in ({f.line: f for f in lint(filled)}[7].fix_title or "")
    # a file that imports only torch names the class in full
    plain = source.replace("from torch import nn\n", "").replace("(nn.Module)", "(torch.nn.Module)")
    plain = plain.replace("nn.init.", "torch.nn.init.")
    fixed = {f.line: f for f in lint(plain)}[6]
    assert fixed.fix_title == "Make it a parameter: `self.cls_token = torch.nn.Parameter(...)`"


def test_plain_tensor_attribute_offers_no_fix_where_register_buffer_would_raise() -> None:
    """``register_buffer`` raises for a name the module already has (a class attribute, an
    earlier ``self.table = None``) and before ``super().__init__()``: the finding stays, the
    quick fix does not."""
    source = """\
import torch
from torch import nn
device = torch.device("cuda")
class Detect(nn.Module):
    stride = None
    def __init__(self, n):
        self.early = torch.ones(n)
        super().__init__()
        self.table = None
        self.table = torch.arange(n).float()
        self.stride = torch.tensor([8.0, 16.0])
        self.fine = torch.zeros(n)
    def forward(self, x):
        return x * self.early + self.table + self.stride.sum() + self.fine
"""
    found = {f.line: f for f in lint(source)}
    assert sorted(found) == [7, 10, 11, 12]
    assert [line for line, f in sorted(found.items()) if f.edits] == [12]
