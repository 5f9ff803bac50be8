"""``launch``: debugpy runs the program under the agent, with the session's tensor breakpoints.

The proxy rewrites the request so that debugpy starts ``-m tensor_dap.agent.debuggee`` with the
program (or module), its arguments and the enabled rules, and passes the agent the channel's
address in its environment, and the trace-store run it writes
(:class:`~tensor_dap.adapter.session_trace.SessionTrace`); ``"simulate": "cuda"`` runs it on a
simulated CUDA device (:mod:`tensor_dap.simulate`); ``"tensorMemoryLimit": "6GiB"`` is the
``memory-limit`` rule's limit. An interpreter that lacks tensor-dap, no program, an unknown
rule, a bad size or ``"simulate"`` kind refuses the launch
(:class:`~tensor_dap.adapter.proxy.Refusal`) before debugpy sees it.
"""

from __future__ import annotations

import os
from typing import Any

import tensor_dap
from tensor_dap.adapter.interpreter import interpreter_command, missing_agent, split_args
from tensor_dap.adapter.proxy import Message, Refusal
from tensor_dap.adapter.session_trace import SessionTrace
from tensor_dap.adapter.tensor_breakpoints import TensorBreakpoints
from tensor_dap.catalog import SIMULATE_KINDS

_PACKAGE_DIR = os.path.dirname(os.path.abspath(tensor_dap.__file__))


def rewrite_launch(message: Message, breakpoints: TensorBreakpoints, trace: SessionTrace) -> None:
    """Make ``message`` (a launch request) start the program under the agent."""
    arguments = message.setdefault("arguments", {})
    breakpoints.take(message)
    program, module = arguments.pop("program", None), arguments.pop("module", None)
    if not program and not module:
        raise Refusal("launch needs 'program' or 'module'")
    simulate = arguments.pop("simulate", None)
    if simulate is not None and simulate not in SIMULATE_KINDS:
        raise Refusal(f"bad simulate {simulate!r}: one of {', '.join(SIMULATE_KINDS)}")
    if program and "cwd" not in arguments:
        # the debuggee starts in the program's folder: name the program absolutely
        program = os.path.abspath(program)
        arguments["cwd"] = os.path.dirname(program)
    python = interpreter_command(arguments.get("python"))
    problem = missing_agent(python) if python is not None else None
    if problem is not None:
        raise Refusal(problem)
    target = ["--program", program] if program else ["--module", module]
    user_args = split_args(arguments.get("args"))
    store = trace.begin(arguments, [program or f"-m {module}", *user_args], simulate)
    arguments["module"] = "tensor_dap.agent.debuggee"
    simulated = ["--simulate", simulate] if simulate else []
    limit = breakpoints.memory_limit
    limited = ["--memory-limit", str(limit)] if limit is not None else []
    arguments["args"] = [
        *target,
        "--rules",
        ",".join(breakpoints.rules),
        *store,
        *simulated,
        *limited,
        "--",
        *user_args,
    ]
    env = dict(arguments.get("env") or {})
    env.update(breakpoints.channel.environment())
    arguments["env"] = env
    hide_own_frames(arguments)


def hide_own_frames(arguments: dict[str, Any]) -> None:
    """tensor-dap's own frames are library code for stepping and "just my code"."""
    arguments["rules"] = [
        *(arguments.get("rules") or []),
        {"path": _PACKAGE_DIR, "include": False},
    ]
