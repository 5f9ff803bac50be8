"""The trace recorder: what each user line produced, for the editor's inline hints.

The engine hands it op outputs together with the user's frame — sampled per call site (the
first hits, then one in 64: enough to notice a shape that varies, at a fraction of the cost of
reading metadata on every op). Per (code, line) it keeps the last shape / dtype / device / grad
state — bounded by the size of the code, not by the number of steps. :meth:`observations` turns
the table into trace-store rows, naming each line's value by the variable it is assigned to;
the hit count comes from the engine's per-site counters when it has them.
"""

from __future__ import annotations

import ast
import os
from types import CodeType, FrameType
from typing import Any, Callable, Optional

from tensor_dap.agent import naming
from tensor_dap.tensor_text import dtype_name, grad_fn_name
from tensor_dap.tracedb import Observation

LineHits = Callable[[CodeType, int], int]


def _meta(tensor: Any) -> Optional[tuple[Any, ...]]:
    try:
        return (
            tuple(tensor.shape),
            dtype_name(tensor.dtype),
            str(tensor.device),
            bool(tensor.requires_grad),
            grad_fn_name(tensor),
        )
    except Exception:
        return None


class TraceRecorder:
    """Collects per-line tensor metadata from the engine's op stream."""

    def __init__(self, process: str = "main") -> None:
        self.process = process
        #: (id(code), line) -> [meta, hits, shape_varied, code]
        self._sites: dict[tuple[int, int], list[Any]] = {}

    def observe(self, frame: FrameType, tensor: Any) -> None:
        code = frame.f_code
        key = (id(code), frame.f_lineno)
        entry = self._sites.get(key)
        if entry is None:
            entry = self._sites[key] = [None, 0, False, code]
        entry[1] += 1
        meta = _meta(tensor)
        if meta is not None:
            old = entry[0]
            if old is not None and old[0] != meta[0]:
                entry[2] = True
            entry[0] = meta

    def paths(self) -> set[str]:
        return {os.path.abspath(entry[3].co_filename) for entry in dict(self._sites).values()}

    def observations(self, line_hits: Optional[LineHits] = None) -> list[Observation]:
        """Trace-store rows for everything seen so far (safe to call from another thread).

        ``line_hits(code, line)``: how often the line ran, when known better than by the
        number of samples (0 when unknown).
        """
        rows = []
        for (_, line), (meta, sampled, varied, code) in dict(self._sites).items():
            if meta is None:
                continue
            hits = max(line_hits(code, line) if line_hits else 0, sampled)
            path = os.path.abspath(code.co_filename)
            name, col = value_name(path, line)
            shape, dtype, device, requires_grad, grad_fn = meta
            rows.append(
                Observation(
                    path=path,
                    line=line,
                    name=name,
                    shape=shape,
                    dtype=dtype,
                    device=device,
                    requires_grad=requires_grad,
                    grad_fn=grad_fn,
                    hits=hits,
                    shape_varied=varied,
                    process=self.process,
                    col=col,
                )
            )
        return rows


class LabelledRecorder(TraceRecorder):
    """Rows labelled with the process as it is when they are written (``rank 1``,
    ``worker 0``): a DataLoader worker learns its worker id only after the fork that made it."""

    def observations(self, line_hits: Optional[LineHits] = None) -> list[Observation]:
        from tensor_dap.agent.process import process_info
        from tensor_dap.tracedb import process_label

        self.process = process_label(process_info())
        return super().observations(line_hits)


def value_name(path: str, line: int) -> tuple[str, Optional[int]]:
    """What the value of ``line`` is called, and the column where its statement ends.

    ``y = torch.zeros(6)`` -> ``("y", 18)``; ``y.masked_scatter_(m, x)`` -> ``("y", ...)``;
    otherwise the statement's text.
    """
    tree = naming._tree(path)
    if tree is None:
        return "", None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno != line:
            continue
        end = node.end_col_offset if node.end_lineno == line else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            return naming._segment(path, node.targets[0]) or "", end
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            return naming._segment(path, node.target) or "", end
        if isinstance(node, ast.Return):
            return "return", end
        if isinstance(node, ast.Expr):
            call = node.value
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
                return naming._segment(path, call.func.value) or "", end
            return naming._segment(path, call) or "", end
        return "", end
    return "", None
