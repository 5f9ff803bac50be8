"""``nan-inf`` on real programs: NaN passed along inside list arguments, tensor types it cannot
read, and a rule that fails (any rule) showing in the summary, the report and the exit status."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from tensor_dap.agent.rules import nan_inf


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def test_nan_passed_along_inside_a_list_is_blamed_where_it_was_made(
    tmp_path: Path, check, engine_path
) -> None:
    script = write(
        tmp_path,
        "lists.py",
        """
        import torch
        t = torch.tensor([1.0, -1.0])
        u = torch.log(t)
        s = torch.stack([u, t])
        c = torch.cat((t, u), dim=0)
        k = torch.cat(tensors=[u, t])
        print(float(s.sum()), float(c.sum()), float(k.sum()))
        """,
    )
    run = check(script, rules="nan-inf", env=engine_path)
    assert run.pairs() == {("nan-inf", 3)}, run.stderr
    assert run.finding("nan-inf")["message"].startswith("`torch.log(t)`: log produced 1 NaN")
    assert run.returncode == 1


def test_tensor_types_it_cannot_read_skip_the_op_not_the_rule(tmp_path: Path, check) -> None:
    """Sparse (COO, CSR), quantized, nested and wrapper-subclass tensors: judged through their
    values where they have them, else skipped; a NaN made later is still reported."""
    script = write(
        tmp_path,
        "gcn.py",
        """
        import torch
        from torch.testing._internal.two_tensor import TwoTensor

        x = torch.randn(4, 3)
        w = torch.randn(3, 2, requires_grad=True)
        adj = torch.diag(torch.ones(4)).to_sparse()
        h = adj @ (x @ w)  # a GCN layer: sparse adjacency times features
        csr = torch.diag(torch.ones(4)).to_sparse_csr() @ x
        coo = (adj * 2).coalesce()
        q = torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)
        deq = q.dequantize() * 2
        nt = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
        nt2 = nt * 2
        tt = TwoTensor(torch.randn(3), torch.randn(3))
        tt2 = tt * 2
        bad = torch.log(h - 10)  # the real NaN
        print(float(bad.sum()))
        """,
    )
    run = check(script, rules="nan-inf")
    assert run.report["failed_rules"] == {}, run.stderr
    assert run.pairs() == {("nan-inf", 16)}, run.stderr
    assert "log produced 8 NaN" in run.finding("nan-inf")["message"]
    assert "failed and was switched off" not in run.stderr


def test_values_of_sparse_nested_and_wrapper_tensors_are_judged() -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    nan = torch.tensor([1.0, float("nan")])
    assert nan_inf._finite(torch.diag(nan).to_sparse()) is False
    assert nan_inf._finite(torch.diag(nan).to_sparse_csr()) is False
    assert nan_inf._finite(torch.nested.nested_tensor([nan, torch.ones(3)])) is False
    assert nan_inf._finite(TwoTensor(torch.ones(2), nan)) is False
    assert nan_inf._finite(TwoTensor(torch.ones(2), torch.ones(2))) is True
    assert nan_inf._finite(torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8))
    assert nan_inf._finite(torch.empty(2, device="meta")) is None
    # the cheap screen (a sum) overflows here from finite values: confirmed, not reported
    assert nan_inf._finite(torch.full((8,), 60000.0, dtype=torch.float16)) is True
    assert nan_inf._finite(torch.tensor([1.0, float("inf"), -float("inf")])) is False


def test_a_failing_rule_shows_in_the_summary_the_report_and_the_exit_status(
    tmp_path: Path, check
) -> None:
    """A rule switched off mid-run means the run was not fully checked: never a silent 0."""
    script = write(
        tmp_path,
        "broken_rule.py",
        """
        import torch
        from tensor_dap.agent.rules import broadcast

        def broken(*args, **kwargs):
            raise ZeroDivisionError("bug in a rule\\nsecond line of a long message")

        broadcast.before = broken  # ops planned from now on call it
        print((torch.ones(4) - torch.ones(4, 1)).shape)
        """,
    )
    run = check(script, rules="broadcast")
    assert run.findings == []
    assert run.report["failed_rules"] == {"broadcast": "ZeroDivisionError: bug in a rule"}
    summary = run.stderr[run.stderr.index("tensor-dap: no findings") :]
    line = "tensor-dap: rule broadcast failed and was switched off: ZeroDivisionError: bug in a"
    assert f"{line} rule\n" in summary
    assert run.returncode == 1


def test_the_message_says_the_usual_cause_and_its_fix() -> None:
    """A GCN's ``deg.pow(-0.5)`` on a node of degree 0, a division by a count that is 0, a
    log of a probability that is 0, a square root of a negative variance, an ``exp`` that
    overflows: each message names the input and the fix."""
    import tensor_dap

    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        deg = torch.tensor([2.0, 0.0, 1.0])
        deg.pow(-0.5)
        total, count = torch.tensor([3.0, 0.0]), torch.tensor([3.0, 0.0])
        total / count
        probs = torch.tensor([0.5, 0.0])
        torch.log(probs)
        variance = torch.tensor([1.0, -1e-7])
        torch.sqrt(variance)
        logits = torch.tensor([10.0, 100.0])
        torch.exp(logits)
    hints = [f.message.split("from finite ", 1)[1] for f in watch.findings]
    assert hints == [
        "deg (3,). deg holds 0: add an epsilon (`+ 1e-8`) or clamp it (`.clamp_min(1e-8)`), or "
        "mask those entries (a graph's isolated nodes: add self-loops).",
        "total (2,), count (2,). count holds 0: add an epsilon (`+ 1e-8`) or clamp it "
        "(`.clamp_min(1e-8)`), or mask those entries.",
        "probs (2,). probs holds values <= 0: clamp it (`.clamp_min(1e-8)`) or stay in log space "
        "(`F.log_softmax`, `torch.logsumexp`).",
        "variance (2,). variance holds negative values: clamp it at 0.",
        "logits (2,). The values overflow float32: scale them down (subtract the max before "
        "`exp`) or stay in log space.",
    ]


def test_a_mean_loss_over_only_ignored_targets_is_said_to_be_0_over_0() -> None:
    """A masked-LM batch in which no token was masked: every label is ``-100``; the operands are
    named as the line writes them though the call has keywords."""
    import torch.nn.functional as F

    import tensor_dap

    logits = torch.randn(6, 10, requires_grad=True)
    labels = torch.full((6,), -100)
    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        F.cross_entropy(logits.view(-1, 10), labels.view(-1), ignore_index=-100)
        F.nll_loss(logits.log_softmax(-1), torch.full((6,), 3), ignore_index=3, reduction="sum")
        labels[0] = 2  # one kept target: a finite mean
        F.cross_entropy(logits, labels)
    (finding,) = watch.findings
    assert finding.message.split("from finite ", 1)[1] == (
        "logits.view(-1, 10) (6, 10), labels.view(-1) (6,). Every target in labels.view(-1) "
        "equals ignore_index (-100), so the mean is over no target: 0 / 0. Skip such a batch "
        '(`if (targets != ignore_index).any():`), or sum the loss (reduction="sum") and divide '
        "by the count of kept targets, at least 1."
    )


def test_the_rules_reads_are_not_seen_by_the_programs_modes_subclasses_or_traces() -> None:
    """nan-inf reads each result: the program's dispatch mode does not see those reads, a
    subclass of the program's that dispatches in Python is not read (it would run its code),
    ``torch.jit.trace`` records the program's ops only, and a profile counts them only."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import tensor_dap

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    class Logged(torch.Tensor):
        """A wrapper subclass logging what it is asked, as in PyTorch's own tests."""

        seen: list[str] = []

        @staticmethod
        def __new__(cls, inner: torch.Tensor):  # noqa: ANN205
            return torch.Tensor._make_wrapper_subclass(
                cls, inner.shape, dtype=inner.dtype, device=inner.device
            )

        def __init__(self, inner: torch.Tensor) -> None:
            self.inner = inner

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
            cls.seen.append(func.__name__)
            out = func(*[a.inner if isinstance(a, cls) else a for a in args], **(kwargs or {}))
            return cls(out) if isinstance(out, torch.Tensor) else out

    def program() -> tuple[list[str], list[str], str, list[tuple[str, int]]]:
        x = torch.randn(4, 3)
        with Counting() as counting:
            torch.exp(x).relu()
        Logged.seen = []
        torch.exp(Logged(x))
        traced = torch.jit.trace(lambda t: torch.exp(t) * 2, (x,))
        w = torch.randn(3, requires_grad=True)
        with torch.profiler.profile() as profile:
            torch.exp(x @ w).relu().sum().backward()
        counts = sorted((e.key, e.count) for e in profile.key_averages())
        return counting.seen, list(Logged.seen), str(traced.graph), counts

    plain = program()
    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        watched = program()
    assert watched == plain and watch.failed == {}
