"""Helpers for tests and sample scripts.

:func:`pick_device` gives real CUDA where there is a GPU and a stand-in accelerator on the CPU
elsewhere (:mod:`tensor_dap.testing.standin`), so device-related behaviour can be exercised in CI.
"""

from __future__ import annotations

from tensor_dap.testing.standin import accelerator_device, pick_device

__all__ = ["accelerator_device", "pick_device"]
