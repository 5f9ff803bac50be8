"""A module's tensor kept as a plain attribute (``self.mask = torch.tril(...)`` in
``__init__``) stays on the CPU when the model is moved: device-mismatch's message says so at the
line that meets it, names the attribute and where it was made, and leads to
``register_buffer`` — not to a ``.to(device)`` of the comparison made on the failing line."""

from __future__ import annotations

import contextlib
import runpy
import textwrap
from pathlib import Path

import tensor_dap
from tensor_dap.testing import accelerator_device


def _finding(tmp_path: Path, source: str) -> tuple[int, str]:
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent(source))
    accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, contextlib.suppress(RuntimeError):
        runpy.run_path(str(script))
    (finding,) = watch.findings
    return finding.line, finding.message


def _line(tmp_path: Path, text: str) -> int:
    lines = (tmp_path / "model.py").read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def test_a_causal_mask_kept_as_a_plain_attribute_leads_to_register_buffer(tmp_path: Path) -> None:
    line, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class CausalSelfAttention(nn.Module):
            def __init__(self, n_embd, block_size):
                super().__init__()
                self.qk = nn.Linear(n_embd, 2 * n_embd)
                self.mask = torch.tril(torch.ones(block_size, block_size)).view(
                    1, block_size, block_size
                )

            def forward(self, x):
                B, T, C = x.size()
                q, k = self.qk(x).split(C, dim=2)
                att = q @ k.transpose(-2, -1)
                att = att.masked_fill(self.mask[:, :T, :T] == 0, float("-inf"))
                return att.softmax(-1)

        device = accelerator_device()
        model = CausalSelfAttention(8, 6).to(device)
        model(torch.randn(2, 5, 8, device=device))
        """,
    )
    assert line == _line(tmp_path, "att = att.masked_fill(")
    made = _line(tmp_path, "self.mask = torch.tril(")
    assert (
        f"self.mask is a plain tensor attribute of CausalSelfAttention (made at model.py:{made}"
        in message
    )
    assert "model.to(device) moves parameters and buffers, not plain attributes" in message
    assert 'self.register_buffer("mask", ..., persistent=False)' in message
    assert "Move self.mask[:, :T, :T] == 0 to that device" not in message


def test_a_table_read_through_a_slice_in_a_module_without_parameters(tmp_path: Path) -> None:
    """A positional encoding written with ``self.pe = pe`` (no parameter, no buffer)."""
    line, message = _finding(
        tmp_path,
        """
        import math
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class PositionalEncoding(nn.Module):
            def __init__(self, d_model, max_len=50):
                super().__init__()
                position = torch.arange(max_len).unsqueeze(1)
                div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
                pe = torch.zeros(max_len, d_model)
                pe[:, 0::2] = torch.sin(position * div)
                pe[:, 1::2] = torch.cos(position * div)
                self.pe = pe

            def forward(self, x):
                return x + self.pe[: x.size(1)]

        device = accelerator_device()
        encode = PositionalEncoding(8).to(device)
        encode(torch.randn(2, 7, 8, device=device))
        """,
    )
    assert line == _line(tmp_path, "return x + self.pe")
    assert "self.pe is a plain tensor attribute of PositionalEncoding" in message
    assert 'self.register_buffer("pe", ..., persistent=False)' in message


def test_a_mask_made_in_forward_leads_to_the_factory_it_comes_from(tmp_path: Path) -> None:
    """Not an attribute: the fix is the ``device=`` of the ``torch.ones`` the comparison was
    computed from, two lines up — not a ``.to()`` of the comparison."""
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)
                self.scale = torch.ones(4)

            def forward(self, x):
                mask = torch.tril(torch.ones(x.size(1), x.size(1)))
                return self.proj(x).masked_fill(mask == 0, 0.0)

        device = accelerator_device()
        Masked().to(device)(torch.randn(2, 4, 4, device=device))
        """,
    )
    assert "plain tensor attribute" not in message
    ones = _line(tmp_path, "mask = torch.tril(torch.ones(")
    # (in a module's forward: the device of its input, not the script's `device` global)
    assert f"at model.py:{ones}: pass it device=x.device." in message
    assert "Move mask == 0" not in message


def test_a_mask_made_at_module_level_keeps_the_scripts_device_variable(tmp_path: Path) -> None:
    """Made outside the method: the method's ``x`` is not in scope there."""
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        device = accelerator_device()
        MASK = torch.tril(torch.ones(8, 8))

        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                mask = MASK[: x.size(1), : x.size(1)]
                return self.proj(x).masked_fill(mask == 0, 0.0)

        Masked().to(device)(torch.randn(2, 4, 4, device=device))
        """,
    )
    ones = _line(tmp_path, "MASK = torch.tril(")
    assert f"at model.py:{ones}: pass it device=device." in message


def test_a_tensor_computed_from_data_is_moved(tmp_path: Path) -> None:
    """Computed from a batch's data as well as a factory: making the factory's tensor on the
    device would only move the mismatch; the comparison is to be moved."""
    _, message = _finding(
        tmp_path,
        """
        import numpy as np
        import torch
        from tensor_dap.testing import accelerator_device

        device = accelerator_device()
        lengths = torch.from_numpy(np.array([3, 1]))
        positions = torch.arange(4)
        mask = positions[None, :] < lengths[:, None]
        scores = torch.randn(2, 4, device=device).masked_fill(~mask, 0.0)
        """,
    )
    assert "is computed from" not in message
    assert "Move ~mask to that device with .to(device)." in message


def test_the_attribute_is_found_from_a_helper_function_and_through_indexing(
    tmp_path: Path,
) -> None:
    """``attend(att, self.mask, T)``: the comparison is made in a module-level function; and a
    loss module's class weights indexed by the device's targets (``self.alpha[target]``)."""
    line, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        def attend(att, mask, T):
            return att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(-1)

        class Attention(nn.Module):
            def __init__(self, n, block):
                super().__init__()
                self.qk = nn.Linear(n, 2 * n)
                self.mask = torch.tril(torch.ones(block, block))

            def forward(self, x):
                q, k = self.qk(x).chunk(2, dim=-1)
                return attend(q @ k.transpose(-2, -1), self.mask, x.size(1))

        device = accelerator_device()
        Attention(8, 6).to(device)(torch.randn(2, 5, 8, device=device))
        """,
    )
    assert line == _line(tmp_path, "return att.masked_fill(")
    assert "self.mask is a plain tensor attribute of Attention" in message
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class FocalLoss(nn.Module):
            def __init__(self):
                super().__init__()
                self.alpha = torch.tensor([0.25, 0.75])

            def forward(self, logits, target):
                return (self.alpha[target] * logits.logsumexp(-1)).mean()

        device = accelerator_device()
        FocalLoss()(torch.randn(4, 2, device=device), torch.tensor([0, 1, 1, 0], device=device))
        """,
    )
    assert "self.alpha is a plain tensor attribute of FocalLoss" in message
    assert "then move the FocalLoss too, as the model is: .to(device)." in message


def test_a_module_without_parameters_the_program_moves_is_not_told_to_move(
    tmp_path: Path,
) -> None:
    """A diffusion schedule's module (plain tensors, nothing registered) made with
    ``.to(device)``: moving it moved nothing, and the advice does not send the reader back to
    that line; registering the buffers is the fix."""
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class Diffusion(nn.Module):
            def __init__(self, steps=10):
                super().__init__()
                self.sqrt_ac = torch.linspace(0.99, 0.5, steps).sqrt()

            def q_sample(self, x0, t):
                return self.sqrt_ac[t].view(-1, 1) * x0

        device = accelerator_device()
        diff = Diffusion().to(device)
        x0 = torch.randn(4, 3, device=device)
        diff.q_sample(x0, torch.randint(0, 10, (4,), device=device))
        """,
    )
    assert "self.sqrt_ac is a plain tensor attribute of Diffusion" in message
    assert 'self.register_buffer("sqrt_ac", ..., persistent=False)' in message
    assert "then move the Diffusion too" not in message


def test_a_batch_the_forward_keeps_is_not_taken_for_an_attribute(tmp_path: Path) -> None:
    """``self.last_input = x`` for a hook: the batch left on the CPU is the culprit."""
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)

            def forward(self, x):
                self.last_input = x
                return self.fc(x)

        device = accelerator_device()
        Net().to(device)(torch.randn(3, 4))
        """,
    )
    assert "plain tensor attribute" not in message
    assert "Create x with device=" in message


def test_a_model_never_moved_is_not_told_to_register_buffers(tmp_path: Path) -> None:
    _, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class Encoding(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)
                self.pe = torch.zeros(64, 8)

            def forward(self, x):
                return self.proj(x + self.pe[: x.size(1)])

        Encoding()(torch.randn(2, 7, 8, device=accelerator_device()))
        """,
    )
    assert "plain tensor attribute" not in message


def test_no_factory_advice_when_an_input_has_no_record(tmp_path: Path) -> None:
    """The lengths were made before the watch: making ``torch.arange`` on the device would
    only move the mismatch to the comparison."""
    script = tmp_path / "model.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import tensor_dap
            from tensor_dap.testing import accelerator_device

            device = accelerator_device()
            lengths = torch.tensor([[3], [1]])
            with tensor_dap.watch(rules=["device-mismatch"]) as watch:
                try:
                    mask = torch.arange(4) < lengths
                    torch.randn(2, 4, device=device).masked_fill(~mask, 0.0)
                except RuntimeError:
                    pass
            FOUND = [f.message for f in watch.findings]
            """
        )
    )
    (message,) = runpy.run_path(str(script))["FOUND"]
    assert "is computed from" not in message
    assert "Move ~mask to that device with .to(device)." in message


def test_a_learned_token_kept_as_a_plain_attribute_leads_to_nn_parameter(tmp_path: Path) -> None:
    """ViT's ``cls_token`` without ``nn.Parameter``: as a buffer it would move and never
    learn; the message says what the optimizer misses and to make it a parameter."""
    line, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class ViT(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.proj = nn.Linear(12, dim)
                self.cls_token = torch.zeros(1, 1, dim)

            def forward(self, x):
                x = self.proj(x)
                cls = self.cls_token.expand(x.shape[0], -1, -1)
                return torch.cat([cls, x], dim=1)

        device = accelerator_device()
        ViT(8).to(device)(torch.randn(2, 4, 12, device=device))
        """,
    )
    assert line == _line(tmp_path, "return torch.cat(")
    made = _line(tmp_path, "self.cls_token = torch.zeros")
    assert f"self.cls_token is a plain tensor attribute of ViT (made at model.py:{made})" in message
    assert "model.parameters() leaves it out, so the optimizer never trains it" in message
    assert "self.cls_token = nn.Parameter(...)" in message
    assert "register_buffer" not in message


def test_a_schedule_read_itself_is_named_before_what_it_was_computed_from(tmp_path: Path) -> None:
    """A diffusion model keeps its noise schedule as plain attributes: ``self.betas``, and
    ``self.sqrt_alphas_cumprod`` computed from it. The gather of the latter meets the device:
    the attribute read is the one named (not ``self.betas``, which the first plain attribute
    in the module happens to be), and the schedule's others are listed to register alike."""
    line, message = _finding(
        tmp_path,
        """
        import torch
        from torch import nn
        from tensor_dap.testing import accelerator_device

        class GaussianDiffusion(nn.Module):
            def __init__(self, model, timesteps=50):
                super().__init__()
                self.model = model
                betas = torch.linspace(1e-4, 0.02, timesteps)
                self.betas = betas
                alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
                self.sqrt_alphas_cumprod = torch.sqrt(alphas_cumprod)
                self.sqrt_one_minus_alphas_cumprod = torch.sqrt(1.0 - alphas_cumprod)
                self.scale = torch.tensor(0.5)  # (0-dim: rides along with device tensors)
                self.cls_token = torch.zeros(1, 2, requires_grad=True)  # (learned: a Parameter)

            @staticmethod
            def extract(a, t):
                return a.gather(-1, t)[:, None]

            def forward(self, x0):
                t = torch.randint(0, 50, (x0.shape[0],), device=x0.device)
                return self.extract(self.sqrt_alphas_cumprod, t) * x0

        device = accelerator_device()
        diffusion = GaussianDiffusion(nn.Linear(2, 2)).to(device)
        diffusion(torch.randn(16, 2, device=device))
        """,
    )
    assert line == _line(tmp_path, "return a.gather(-1, t)")
    made = _line(tmp_path, "self.sqrt_alphas_cumprod = torch.sqrt(")
    assert (
        "self.sqrt_alphas_cumprod is a plain tensor attribute of GaussianDiffusion "
        f"(made at model.py:{made})" in message
    )
    assert 'self.register_buffer("sqrt_alphas_cumprod", ..., persistent=False)' in message
    assert (
        "GaussianDiffusion keeps self.betas and self.sqrt_one_minus_alphas_cumprod the same way, "
        "on the CPU: register them alike." in message
    )
