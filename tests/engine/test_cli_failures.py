"""A script that fails is never summed up as "no findings": ``check`` and ``trace`` say how it
failed, ``trace`` keeps the script's exit status (130 after Ctrl-C, as Python), and tracebacks
are Python's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

RAISES_IN_TORCH = """import torch
import torch.nn.functional as F
from torch import nn

def loss_of(logits, target):
    return F.cross_entropy(logits, target)

model = nn.Sequential(nn.Linear(4, 3))
logits = model(torch.randn(2, 4))
loss = loss_of(logits, torch.tensor([0, 7]))
"""


SCRIPTS = {
    "raises.py": 'import torch\nx = torch.ones(3)\nraise ValueError("bad shape (3, 4)")\n',
    "exits.py": "import sys\nsys.exit(3)\n",
    "broken.py": "x = (\n",
    "interrupted.py": "raise KeyboardInterrupt\n",
    "torch_raises.py": RAISES_IN_TORCH,
    "backward.py": "import torch\nx = torch.ones(3)\nx.sum().backward()\n",
    # rich.traceback.install(), loguru: the program's own hook prints what it raised
    "own_hook.py": (
        "import sys\nimport torch\n"
        "sys.excepthook = lambda kind, error, tb: print(f'[hook] {kind.__name__}: {error}', "
        "file=sys.stderr)\n"
        "torch.ones(3).sum(dim=4)\n"
    ),
    "main_module.py": (
        "print(type(__loader__).__name__, __cached__, __spec__, __annotations__)\n"
        "print(sorted(k for k in globals() if k.startswith('__')))\n"
    ),
    # a thread's error goes to threading.excepthook alone; the program goes on
    "thread_with_hook.py": (
        "import sys, threading\n"
        "sys.excepthook = lambda *a: print('[hook]', a[1], file=sys.stderr)\n"
        "def work():\n    raise ValueError('thread boom')\n"
        "t = threading.Thread(target=work, name='worker')\nt.start(); t.join()\n"
        "print('main goes on')\n"
    ),
    # a crash reporter's hook that ends the program itself
    "exiting_hook.py": (
        "import sys\n"
        "def hook(kind, error, tb):\n    print('[reported]', error, file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "sys.excepthook = hook\nraise ValueError('boom')\n"
    ),
    "failing_hook.py": (
        "import sys\ndef hook(kind, error, tb):\n    raise RuntimeError('hook broke')\n"
        "sys.excepthook = hook\nraise ValueError('boom')\n"
    ),
}


def _run(tmp_path: Path, command: str, name: str) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(SCRIPTS[name])
    return subprocess.run(
        [sys.executable, "-m", "tensor_dap", command, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "summary"),
    [
        ("raises.py", "the script failed: ValueError at raises.py:3: bad shape (3, 4)"),
        ("exits.py", "the script failed: exit 3"),
        ("broken.py", "the script failed: SyntaxError at broken.py:1: '(' was never closed"),
        # the user's line, not torch's where the error was raised
        ("backward.py", "the script failed: RuntimeError at backward.py:3: element 0 of"),
    ],
)
def test_check_says_how_the_script_failed(tmp_path: Path, name: str, summary: str) -> None:
    done = _run(tmp_path, "check", name)
    assert done.returncode == (3 if name == "exits.py" else 1)  # the script's own
    (header,) = [
        line
        for line in done.stderr.splitlines()
        if re.match(r"tensor-dap: (no findings|\d+ finding\(s\))", line)
    ]
    assert re.match(rf"tensor-dap: (no findings|1 finding\(s\)); {re.escape(summary)}", header)


@pytest.mark.parametrize("command", ["check", "trace"])
@pytest.mark.parametrize("name", ["exits.py", "interrupted.py"])
def test_the_tool_exits_as_the_script_would(tmp_path: Path, name: str, command: str) -> None:
    """``sys.exit(3)`` exits 3; an uncaught KeyboardInterrupt ends the process by SIGINT, as
    Python's own exit does (a shell sees 130), after the report."""
    done = _run(tmp_path, command, name)
    plain = subprocess.run([sys.executable, str(tmp_path / name)], capture_output=True)
    assert done.returncode == plain.returncode == (3 if name == "exits.py" else -2)
    if command == "check":
        assert "tensor-dap: no findings; the script failed" in done.stderr


def _traceback(stderr: str) -> str:
    start = stderr.index("Traceback (most recent call last):")
    end = stderr.index("\n", stderr.index("IndexError", start))
    return stderr[start:end]


@pytest.mark.parametrize("command", ["check", "trace"])
def test_a_traceback_through_torch_is_pythons(tmp_path: Path, command: str) -> None:
    """No frame of the watch (torch's ``handle_torch_function`` and the call that led to it)
    between the user's lines and torch's own."""
    done = _run(tmp_path, command, "torch_raises.py")
    plain = subprocess.run(
        [sys.executable, str(tmp_path / "torch_raises.py")], capture_output=True, text=True
    )
    assert "IndexError" in plain.stderr
    assert _traceback(done.stderr) == _traceback(plain.stderr)


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("own_hook.py", 1),
        ("failing_hook.py", 1),
        ("thread_with_hook.py", 0),
        ("exiting_hook.py", 3),
    ],
)
def test_the_programs_excepthook_prints_its_error(tmp_path: Path, name: str, status: int) -> None:
    """A program that set ``sys.excepthook`` has it print its uncaught error under the tool,
    as without it: a hook that raises is reported as Python reports it, one that exits ends
    the program with its status; a thread's error is not the hook's."""
    done = _run(tmp_path, "check", name)
    plain = subprocess.run(
        [sys.executable, str(tmp_path / name)], capture_output=True, text=True, cwd=tmp_path
    )
    own = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("tensor-dap"))
    assert own.strip() == plain.stderr.strip()
    assert done.stdout == plain.stdout
    assert done.returncode == plain.returncode == status
    if status == 3:
        assert "tensor-dap: no findings; the script failed: exit 3" in done.stderr
    traced = _run(tmp_path, "trace", "own_hook.py")  # (trace prints its lines on stderr too)
    assert "[hook] IndexError: Dimension out of range" in traced.stderr
    assert "Traceback" not in traced.stderr


def test_the_script_runs_as_a_main_module_python_made(tmp_path: Path) -> None:
    """The script's module has what ``python script.py`` gives it: a ``SourceFileLoader``,
    ``__cached__`` and ``__annotations__``, and no more."""
    done = _run(tmp_path, "check", "main_module.py")
    plain = subprocess.run(
        [sys.executable, str(tmp_path / "main_module.py")], capture_output=True, text=True
    )
    assert done.stdout == plain.stdout
    assert plain.stdout.startswith("SourceFileLoader None None {}")
