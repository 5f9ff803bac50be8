"""Which process of a multi-process run this is: pid, rank, DataLoader worker id.

Findings and trace-store rows carry it, so that a report of a torchrun job says which rank hit a
bug (named by :func:`tensor_dap.findings.process_tag`). The rank comes from ``RANK`` /
``LOCAL_RANK`` (set by torchrun) or, when those are missing, from an initialised
``torch.distributed``; the worker id from ``torch.utils.data.get_worker_info()``. A process
that tensor-dap reached through its children's bootstrap (:mod:`tensor_dap.agent.spread`) and
that has neither is named by its pid.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

ROOT_ENV = "TENSOR_DAP_ROOT_PID"
"""The pid of the process tensor-dap was started for; every other process is a child."""


def current_rank() -> Optional[int]:
    """This process's rank in a distributed job, or None outside one."""
    value = os.environ.get("RANK")
    if value is not None and value.isdigit():
        return int(value)
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


def is_child() -> bool:
    """Whether this is a process started by the one tensor-dap was started for."""
    root = os.environ.get(ROOT_ENV)
    return root is not None and root != str(os.getpid())


def process_info() -> dict[str, Any]:
    """Which process a finding comes from: pid, and rank / worker id when there are several."""
    info: dict[str, Any] = {"pid": os.getpid()}
    rank = current_rank()
    if rank is not None:
        info["rank"] = rank
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.isdigit():
        info["local_rank"] = int(local)
    data = sys.modules.get("torch.utils.data")
    try:
        worker = data.get_worker_info() if data is not None else None
    except Exception:
        worker = None
    if worker is not None:
        info["worker"] = worker.id
    if is_child():
        info["child"] = True
    return info
