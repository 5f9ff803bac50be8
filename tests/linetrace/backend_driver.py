"""Run by ``test_monitoring_versions.py`` under each Python found (3.11 with torch, 3.12+ with
the stand-in torch of ``stub_torch/``): traces plain-Python code with the backend
``make_backend`` picks (or ``settrace`` / ``monitoring`` from argv) and prints JSON facts.

Line numbers in the trace are this file's, so traces from different Pythons compare directly.
"""

from __future__ import annotations

import io
import json
import os
import sys
import textwrap
from collections import Counter
from typing import Any

import tensor_dap
from tensor_dap.linetrace import backends
from tensor_dap.linetrace.backends import make_backend
from tensor_dap.linetrace.output import Sink
from tensor_dap.linetrace.tracer import Tracer

LIBRARY_FILES = (json.__file__, json.encoder.__file__, textwrap.__file__)
#: backend events that reached library code: asked whether to trace it (``Tracer.wanted``,
#: by code object), told a line of it ran (``Tracer.line``, in total). Counted in the Tracer,
#: not by wrapping the backend's callbacks: they find the frame as ``sys._getframe(1)``.
wanted_asked: Counter = Counter()
library_lines = [0]


def count_library_events() -> None:
    wanted, line = Tracer.wanted, Tracer.line

    def counted_wanted(self: Tracer, code: Any) -> bool:
        if code.co_filename in LIBRARY_FILES:
            wanted_asked[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        return wanted(self, code)

    def counted_line(self: Tracer, frame: Any, lineno: int) -> None:
        if frame.f_code.co_filename in LIBRARY_FILES:
            library_lines[0] += 1
        line(self, frame, lineno)

    Tracer.wanted = counted_wanted  # type: ignore[method-assign]
    Tracer.line = counted_line  # type: ignore[method-assign]


def helper(values):
    doubled = []
    for v in values: doubled.append(v * 2)  # noqa: E701  # fmt: skip
    return sum(doubled)


def countdown(n):
    while n > 0:
        yield n
        n -= 1


def fails(x):
    y = x + 1
    raise ValueError(f"bad {y}")


def work(n):
    total = 0
    items = []
    for i in range(n):
        total += i
        items.append(i)
        text = json.dumps(items[:2])
    short = textwrap.shorten("a b c d e f g", width=5)
    got = helper(items)
    down = list(countdown(2))
    try:
        fails(total)
    except ValueError as error:
        caught = str(error)
    return total + got + len(text) + len(short) + len(down) + len(caught)


def block():
    lines: list[str] = []
    with tensor_dap.snoop(output=lines.append, rules=None):
        x = 1
        for _ in range(5):
            x = x + 1
        name = "done"
    after = x + len(name)
    return lines, after


def first():
    a = 1
    return a


def second():
    b = 2
    return b


def only_sessions(monitoring):
    """Two sessions with different ``only=``: what the first left out, the second traces."""
    out = io.StringIO()
    for only in ("first", "second"):
        tracer = Tracer(Sink(out), only=only)
        backend = make_backend(tracer, monitoring)
        backend.start()
        try:
            first()
            second()
        finally:
            backend.stop()
            tracer.close()
    return out.getvalue()


def main() -> None:
    choice = sys.argv[1] if len(sys.argv) > 1 else "auto"
    monitoring = {"auto": None, "settrace": False, "monitoring": True}[choice]
    if monitoring is not None:  # snoop() calls make_backend(tracer): force its choice
        backends.MONITORING = monitoring
    count_library_events()
    chosen = type(make_backend(Tracer(Sink(io.StringIO())))).__name__
    lines: list[str] = []
    traced = tensor_dap.snoop(output=lines.append, depth=3, rules=None)(work)
    results = [traced(12) for _ in range(3)]
    library_after_first = sum(wanted_asked.values())
    for _ in range(20):
        json.dumps([1, 2, 3])
        textwrap.shorten("a b c d e f g", width=5)
    block_lines, after = block()
    gettrace = sys.gettrace()
    report = {
        "python": list(sys.version_info[:2]),
        "backend": chosen,
        "results": results + [after],
        "trace": lines,
        "block": block_lines,
        "only_sessions": only_sessions(monitoring),
        "library_wanted": dict(wanted_asked),
        "library_wanted_after_first_call": library_after_first,
        "library_wanted_total": sum(wanted_asked.values()),
        "library_lines": library_lines[0],
        "tool_left": backends.MONITORING
        and any(sys.monitoring.get_tool(tool) is not None for tool in (1, 2, 3, 4, 5)),
        "gettrace_left": gettrace is not None,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
