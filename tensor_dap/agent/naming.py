"""Names for the tensors in a finding, read from the user's source and frames.

Only runs when a rule reports (never on the per-op path). A tensor is named by, in order: a
local variable of the user's frame holding it; the text of the operand in the expression running
on the user's line (Python 3.11+ gives its column range through ``co_positions``); a local or a
parameter of a module in the torch frames between the op and the user; else ``operand N``.
"""

from __future__ import annotations

import ast
import dis
import io
import linecache
import os
import sys
import tokenize
from types import FrameType
from typing import Any, Optional, Union

import torch

from tensor_dap import device_fix
from tensor_dap.agent import frames

_TREES: dict[str, Optional[ast.Module]] = {}


def _tree(path: str) -> Optional[ast.Module]:
    if path not in _TREES:
        source = "".join(linecache.getlines(path))
        try:
            _TREES[path] = ast.parse(source) if source else None
        except (SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


def module_tree(path: str) -> Optional[ast.Module]:
    """The parsed source of the file at ``path`` (read once), None when it is not Python."""
    return _tree(path)


def _segment(path: str, node: ast.AST) -> Optional[str]:
    lines = linecache.getlines(path)
    try:
        # (any node with a position: expressions, statements; ast.AST declares none)
        start: int = node.lineno  # type: ignore[attr-defined]
        end: Optional[int] = node.end_lineno  # type: ignore[attr-defined]
        col: int = node.col_offset  # type: ignore[attr-defined]
        end_col: Optional[int] = node.end_col_offset  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if end is None or end_col is None or start > len(lines):
        return None
    if start == end:
        text: str = lines[start - 1].encode()[col:end_col].decode(errors="replace")
        return text
    parts = [lines[start - 1].encode()[col:].decode(errors="replace")]
    parts += lines[start : end - 1]
    parts.append(lines[end - 1].encode()[:end_col].decode(errors="replace"))
    return without_comments("".join(parts))  # a node over several lines spans their comments


def current_node(frame: FrameType) -> Optional[ast.AST]:
    """The innermost AST node whose span is the instruction running in ``frame``."""
    if sys.version_info < (3, 11):
        return None
    code = frame.f_code
    try:
        positions = list(code.co_positions())
        line, end_line, col, end_col = positions[frame.f_lasti // 2]
    except (IndexError, ValueError, AttributeError):
        return None
    if line is None or col is None:
        return None
    tree = _tree(code.co_filename)
    if tree is None:
        return None
    best = None
    for node in ast.walk(tree):
        if (
            getattr(node, "lineno", None) == line
            and getattr(node, "col_offset", None) == col
            and getattr(node, "end_lineno", None) == end_line
            and getattr(node, "end_col_offset", None) == end_col
            and isinstance(node, (ast.expr, ast.AugAssign))
        ):
            best = node
    return best


#: code object -> offsets of its call instructions (:func:`running_calls`)
_CALL_OFFSETS: dict[Any, frozenset[int]] = {}


def running_calls(frame: FrameType) -> Optional[list[str]]:
    """The names called by the call running in ``frame`` (``sum``, ``add_``): its callee where
    Python gives columns (3.11+), else every call on its line when the instruction running is a
    call; None when what runs is no call (``+``, ``+=``) or the source is not there."""
    node = current_node(frame)
    if node is not None:
        return [_callee(node)] if isinstance(node, ast.Call) else None
    code = frame.f_code
    offsets = _CALL_OFFSETS.get(code)
    if offsets is None:
        offsets = _CALL_OFFSETS[code] = frozenset(
            i.offset
            for i in dis.get_instructions(code)
            # (3.11 specialises PRECALL into the call itself: the frame runs there)
            if i.opname.startswith("CALL") or i.opname == "PRECALL"
        )
    tree = _tree(code.co_filename) if frame.f_lasti in offsets else None
    if tree is None:
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    return [_callee(call) for call in calls if call.lineno == frame.f_lineno]


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def expression_text(frame: FrameType) -> str:
    """The expression running on the user's line, else the stripped line."""
    node = current_node(frame)
    if node is not None:
        text = _segment(frame.f_code.co_filename, node)
        if text:
            return " ".join(without_comments(text).split())
    return source_line(frame.f_code.co_filename, frame.f_lineno)


#: what an augmented assignment may run that is not its arithmetic (``items += t`` iterates t)
_NOT_ARITHMETIC = frozenset(("__iter__", "__len__", "__index__", "__int__", "__float__"))
#: a comparison as written -> the op that runs it with its operands swapped
_MIRRORED = {ast.Gt: "lt", ast.GtE: "le", ast.Lt: "gt", ast.LtE: "ge"}


def _operand_texts(frame: FrameType, op_name: str, direct: bool) -> list[str]:
    """Source text of each operand of the expression running in ``frame``.

    Used when the op was called from that frame (``direct``) or the expression is a call of a
    method named like the op (``loss.backward()``, reached through torch's Python wrapper).
    """
    node = current_node(frame)
    path = frame.f_code.co_filename
    if node is None:
        return []
    if not direct and not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == op_name
        and not _names_a_module(frame, node.func.value)
    ):
        return []
    texts: list[Optional[str]] = []
    if isinstance(node, ast.BinOp):
        texts = [_segment(path, node.left), _segment(path, node.right)]
        if op_name.startswith("__r") and op_name not in ("__repr__",):
            texts.reverse()
    elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
        texts = [_segment(path, node.left), _segment(path, node.comparators[0])]
        # (`a >= b` runs as `b.__le__(a)` when b's class is a subclass of a's: a tensor
        # subclass, the simulated CUDA device's)
        if op_name.strip("_") == _MIRRORED.get(type(node.ops[0])):
            texts.reverse()
    elif isinstance(node, ast.AugAssign) and op_name not in _NOT_ARITHMETIC:
        texts = [_segment(path, node.target), _segment(path, node.value)]  # total += loss
        if op_name.startswith("__r"):  # (`total += t` with a float total runs t.__radd__)
            texts.reverse()
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and not _is_module_path(func.value):
            texts.append(_segment(path, func.value))
        texts.extend(_segment(path, a) for a in node.args)
    elif isinstance(node, ast.Subscript):
        texts = [_segment(path, node.value), _segment(path, node.slice)]
    return [t or "" for t in texts]


def _names_a_module(frame: FrameType, node: ast.AST) -> bool:
    """Whether ``node`` (``self`` of ``self.gru(emb, h)``) is a ``torch.nn.Module`` of the
    frame: its call is no tensor method named like the op (``gru``), and its arguments are
    not the op's (the op also takes the module's weights)."""
    if not isinstance(node, ast.Name):
        return False
    try:
        value = frames.read_locals(frame).get(node.id, frame.f_globals.get(node.id))
    except Exception:
        return False
    return isinstance(value, torch.nn.Module)


def _is_module_path(node: ast.AST) -> bool:
    """``torch`` / ``torch.nn.functional`` / ``F``: a call on a module, not a tensor method."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in {"torch", "F", "nn", "np", "functional"}


def _local_name(frame: FrameType, obj: Any) -> Optional[str]:
    try:
        for name, value in frames.read_locals(frame).items():
            if value is obj and name != "self":
                return name
    except Exception:
        return None
    return None


def object_name(frame: Optional[FrameType], obj: Any) -> Optional[str]:
    """What the user's code in ``frame`` calls ``obj``: a local (``opt``), an attribute of
    ``self`` (``self.opt``) or a global of the frame's module (``optimizerD``)."""
    if frame is None:
        return None
    name = _local_name(frame, obj)
    if name is not None:
        return name
    try:
        owner = frames.read_locals(frame).get("self")
        for attribute, value in vars(owner).items() if owner is not None else ():
            if value is obj:
                return f"self.{attribute}"
        for global_name, value in frame.f_globals.items():
            if value is obj:
                return global_name
    except Exception:
        return None
    return None


def names_in_sight(frame: FrameType) -> dict[str, Any]:
    """What the user's code in ``frame`` names, by the name it uses: its module's globals, its
    locals, and ``self``'s attributes and child modules as ``self.<name>``. May raise (a
    mapping that fails to read)."""
    names = {**frame.f_globals, **frames.read_locals(frame)}
    owner = names.get("self")
    if owner is not None and hasattr(owner, "__dict__"):
        names.update((f"self.{n}", value) for n, value in vars(owner).items())
    if isinstance(owner, torch.nn.Module):
        names.update((f"self.{n}", child) for n, child in owner.named_children())
    return names


def innermost_loop(tree: ast.AST, line: int) -> Optional[Union[ast.For, ast.While]]:
    """The innermost ``for`` or ``while`` of ``tree`` around ``line``, if any."""
    loops: list[Union[ast.For, ast.While]] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.While))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(loops, key=lambda node: node.lineno) if loops else None


def modules_in_sight(frame: Optional[FrameType]) -> list[torch.nn.Module]:
    """The modules the user's code in ``frame`` names directly: its locals, the attributes of
    its ``self`` and its module's globals (as :func:`object_name` looks)."""
    if frame is None:
        return []
    try:
        scopes = [frames.read_locals(frame)]
        owner = scopes[0].get("self")
        if owner is not None and hasattr(owner, "__dict__"):
            scopes.append(vars(owner))
        scopes.append(frame.f_globals)
        found: dict[int, torch.nn.Module] = {}
        for scope in scopes:
            for value in list(scope.values()):
                if isinstance(value, torch.nn.Module):
                    found[id(value)] = value
        return list(found.values())
    except Exception:  # (a mapping that fails to read: nothing seen)
        return []


def _module_param_name(frame: FrameType, obj: Any) -> Optional[str]:
    """``Linear.weight`` when ``obj`` is a parameter or buffer of ``self`` in ``frame``."""
    try:
        owner = frames.read_locals(frame).get("self")
    except Exception:
        return None
    if not isinstance(owner, torch.nn.Module):
        return None
    for name, value in list(owner._parameters.items()) + list(owner._buffers.items()):
        if value is obj:
            return f"{type(owner).__name__}.{name}"
    return None


def name_tensors(
    tensors: list[Any],
    op_name: str,
    op_frame: Optional[FrameType],
    user: Optional[FrameType],
    operands: bool = True,
) -> list[str]:
    """One name per tensor, as a person reading the user's line would call it.

    ``operands``: the tensors are the op's arguments in order, so the text of the expression's
    operands can name them.
    """
    texts = []
    if operands and user is not None:
        texts = _operand_texts(user, op_name, op_frame is user)
    names: list[str] = []
    for index, tensor in enumerate(tensors):
        name = _local_name(user, tensor) if user is not None else None
        if name is None and index < len(texts) and texts[index]:
            name = texts[index]
        frame = op_frame
        while name is None and frame is not None and frame is not user:
            name = _module_param_name(frame, tensor) or _local_name(frame, tensor)
            frame = frame.f_back
        if name is None and user is not None:
            name = _attribute_of_local_module(user, tensor)
        names.append(name or f"operand {index}")
    return names


def _attribute_of_local_module(frame: FrameType, obj: Any) -> Optional[str]:
    """``model.fc1.weight`` when a module held in a variable of ``frame`` owns ``obj``, or
    ``self.model.fc1.weight`` when one is an attribute of the frame's ``self`` (a trainer's
    method stepping ``self.optimizer``)."""
    try:
        local = frames.read_locals(frame)
        scopes = list(local.items()) + list(frame.f_globals.items())
        owner = local.get("self")
        if owner is not None and not isinstance(owner, torch.nn.Module):
            held = vars(owner) if hasattr(owner, "__dict__") else {}
            scopes += [(f"self.{k}", v) for k, v in held.items()]
    except Exception:
        return None
    for var, value in scopes:
        if isinstance(value, torch.nn.Module):
            try:
                for name, tensor in value.named_parameters():
                    if tensor is obj:
                        return f"{var}.{name}"
            except Exception:
                continue
    return None


def assignment_target(path: str, line: int) -> Optional[str]:
    """The variable assigned on ``line`` (``w`` for ``w = torch.tensor([1.0])``), if one."""
    tree = _tree(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != line:
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            return _segment(path, node.targets[0])
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            return _segment(path, node.target)
    return None


def statement_text(path: str, line: int) -> str:
    """The simple statement (an assignment, an expression) that ``line`` is part of, on one
    line: ``running = 0.98 * running + 0.02 * loss`` of ``if i: running = ...`` or of a
    statement written over several lines; the line itself when none is found."""
    tree = _tree(path)
    found: Optional[ast.stmt] = None
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            continue
        end = node.end_lineno or node.lineno
        if node.lineno <= line <= end and (found is None or node.lineno >= found.lineno):
            found = node
    text = _segment(path, found) if found is not None else None
    return " ".join(text.split()) if text else source_line(path, line)


def later_methods(path: str, line: int, name: str) -> set[str]:
    """The methods called on ``name`` (``total_loss``, ``self.total``) after ``line`` in the
    innermost function holding it (the module when none): ``{"item"}`` of a later
    ``total_loss.item()``, which a fix turning the total into a number would break."""
    return {
        call.func.attr
        for call in _later_calls(path, line)
        if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == name
    }


def _later_calls(path: str, line: int) -> list[ast.Call]:
    """The calls after ``line`` in the innermost function holding it (the module when none)."""
    tree = _tree(path)
    if tree is None:
        return []
    scope: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and node.lineno >= getattr(scope, "lineno", 0):
                scope = node
    return [n for n in ast.walk(scope) if isinstance(n, ast.Call) and n.lineno > line]


def place(path: str, line: int) -> str:
    """``train.py:12 `loss.backward()``` : where a message sends the reader, with the code."""
    text = source_line(path, line)
    return f"{os.path.basename(path)}:{line}" + (f" `{text}`" if text else "")


def source_line(path: str, line: int) -> str:
    """The code on ``line``, without its comment (a message quotes code, not ``# TODO``)."""
    return without_comments(linecache.getline(path, line)).strip()


def without_comments(text: str) -> str:
    """``text`` with each line's ``#`` comment cut off (a ``#`` inside a string stays, even in
    a string over several lines); line by line when ``text`` does not tokenize."""
    lines = text.split("\n")
    try:
        cuts = {
            token.start[0] - 1: token.start[1]
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT
        }
    except (tokenize.TokenError, SyntaxError):
        return "\n".join(_cut_comment(line) for line in lines).strip()
    kept = (line[: cuts.get(number, len(line))].rstrip() for number, line in enumerate(lines))
    return "\n".join(kept).strip()


def _cut_comment(line: str) -> str:
    quote = ""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote:
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:index].rstrip()
    return line.rstrip()


def device_variable(path: Optional[str]) -> Optional[str]:
    """The user's own name for the device in the file at ``path`` (``device``), read statically,
    for a fix to use (:func:`tensor_dap.device_fix.device_in_fix`); None when it binds none."""
    tree = _tree(path) if path else None
    return device_fix.device_variable(ast.walk(tree)) if tree is not None else None


def assigned_before(frame: Optional[FrameType], name: str) -> Optional[Any]:
    """Where ``name`` was last assigned before the current line of ``frame``, read statically.

    The fallback when the engine never saw a tensor being made (``torch.Tensor([0.0])`` is not a
    torch function; a tensor made before the watch started): the Prov's op is the source text.
    """
    from tensor_dap.agent.provenance import Prov

    if frame is None or not name.isidentifier():
        return None
    code = frame.f_code
    tree = _tree(code.co_filename)
    if tree is None:
        return None
    best = None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        if not code.co_firstlineno <= node.lineno < frame.f_lineno:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = any(isinstance(t, ast.Name) and t.id == name for t in targets)
        if named and (best is None or node.lineno > best.lineno):
            best = node
    if best is None or best.value is None:
        return None
    text = _segment(code.co_filename, best.value) or "?"
    return Prov(code.co_filename, best.lineno, f"`{' '.join(text.split())}`")


#: what parsing a line of the program may raise (not Python, a null byte, too deep)
_UNPARSABLE = (SyntaxError, ValueError, RecursionError)


def parsed_statement(text: str) -> Optional[ast.stmt]:
    """The one statement ``text`` holds; None when it holds another number of them or is not
    Python (a line of a statement spanning several)."""
    try:
        tree = ast.parse(text.strip())
    except _UNPARSABLE:
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def normalized_expression(text: str) -> str:
    """``text`` as ``ast.unparse`` writes it (spacing, quotes), to compare with unparsed code;
    ``text`` itself when it is no expression."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except _UNPARSABLE:
        return text
