"""Checks on the interpreter a launch configuration names (``"python"``), before debugpy starts it.

debugpy runs the program with that interpreter; the proxy makes it run ``-m
tensor_dap.agent.debuggee``. An interpreter without tensor_dap would die with "No module named
tensor_dap" in the debug console and a session that ends at once — the launch is refused instead,
with the command that fixes it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Any, Optional

import tensor_dap

CHECK_TIMEOUT_S = 20.0

_PROBE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.find_spec('tensor_dap')\n"
    "sys.exit(0 if spec is not None else 3)\n"
)


def interpreter_command(python: Any) -> Optional[list[str]]:
    """The launch's ``python`` attribute as a command (a string or a list, as debugpy takes
    it); None when it is absent or names the adapter's own interpreter."""
    if isinstance(python, str) and python.strip():
        command = [python]
    elif isinstance(python, list) and python and all(isinstance(p, str) for p in python):
        command = list(python)
    else:
        return None
    return None if command == [sys.executable] else command


def missing_agent(command: list[str]) -> Optional[str]:
    """Why ``command`` cannot run the agent (a message for the user), or None when it can."""
    shown = shlex.join(command)
    try:
        done = subprocess.run(
            [*command, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return f"the launch configuration's python {shown!r} was not found"
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot start the launch configuration's python {shown!r}: {error}"
    if done.returncode == 3:
        return (
            f"tensor-dap is not installed in {shown}: run `{shown} -m pip install "
            f'tensor-dap=={tensor_dap.__version__}` (or point "python" at the environment '
            "that has it)"
        )
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"the launch configuration's python {shown!r} failed to start: {detail[0]}"
    return None


def split_args(args: Any) -> list[str]:
    """A launch's ``args``: a list as is, a string split as a POSIX shell would (quotes kept
    together: ``--name "my run"`` is two arguments)."""
    if isinstance(args, str):
        try:
            return shlex.split(args)
        except ValueError:  # an unbalanced quote: split on blanks rather than refuse
            return args.split()
    return [str(a) for a in args or []]
