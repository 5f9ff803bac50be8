"""How the agent reaches every Python process a run starts: torchrun ranks, DataLoader workers.

The process tensor-dap starts (or the one it runs in) puts two things in the environment its
children inherit: a bootstrap folder at the front of ``PYTHONPATH`` whose ``sitecustomize``
arms the agent (:mod:`tensor_dap.agent.child`), and :data:`CONFIG_ENV`, a JSON
:class:`ChildConfig` saying which rules to run, where to send findings and which trace-store run
to join. A child started with ``python -I`` or ``-E`` ignores both and is not watched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from tensor_dap.agent.process import ROOT_ENV

CONFIG_ENV = "TENSOR_DAP_CHILD"
HOME_ENV = "TENSOR_DAP_HOME"
"""The folder holding the ``tensor_dap`` package, for a child whose Python cannot import it."""

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")


@dataclass
class ChildConfig:
    """What a child's agent needs to know; travels as JSON in :data:`CONFIG_ENV`."""

    #: rule entries as ``parse_rules`` returns them (``"nan-inf@rank=1"`` allowed)
    rules: list[str] = field(default_factory=list)
    #: per-rule options, e.g. ``{"leaves-device": {"scalars": True}}``
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: folder where each process appends its findings (``findings_log``); None: not collected
    run_dir: Optional[str] = None
    #: trace store to write, and the run (begun by the parent) the rows belong to
    trace: Optional[str] = None
    run_id: Optional[int] = None
    #: print each finding on stderr as it happens (``tensor-dap check``)
    echo: bool = False
    #: pause the debugger on each finding (launched by the debug adapter)
    suspend: bool = False
    #: the device kind the run simulates (``--simulate cuda``), or None
    simulate: Optional[str] = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Optional[ChildConfig]:
        raw = (os.environ if environ is None else environ).get(CONFIG_ENV)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        except (ValueError, TypeError, AttributeError):
            return None


def child_environment(
    config: ChildConfig, base: Mapping[str, str], root_pid: int
) -> dict[str, str]:
    """``base`` plus what makes the Python processes started with it run the agent."""
    env = dict(base)
    env[CONFIG_ENV] = config.to_json()
    env[ROOT_ENV] = str(root_pid)
    env[HOME_ENV] = os.path.dirname(os.path.dirname(os.path.dirname(BOOTSTRAP_DIR)))
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if BOOTSTRAP_DIR not in paths:
        env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *paths])
    return env


class Exported:
    """Put the children's environment into ``os.environ`` (the agent runs in this process);
    :meth:`restore` puts back what was there."""

    def __init__(self, config: ChildConfig) -> None:
        keys = (CONFIG_ENV, ROOT_ENV, HOME_ENV, "PYTHONPATH")
        self._saved = {key: os.environ.get(key) for key in keys}
        os.environ.update(child_environment(config, os.environ, os.getpid()))

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
