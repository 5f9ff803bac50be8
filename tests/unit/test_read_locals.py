"""``frames.read_locals``: a frame's locals, read without keeping them alive (the copy Python
3.11 and 3.12 store in the frame on ``f_locals``), and without changing anything the program
can see: its variables, a ``locals()`` dict it kept, names ``exec`` put in the copy."""

from __future__ import annotations

import sys
import weakref

from tensor_dap.agent import frames


class _Value:
    pass


def test_reading_keeps_no_local_alive_and_changes_no_variable() -> None:
    value = _Value()
    ref = weakref.ref(value)
    count = 5
    read = frames.read_locals(sys._getframe())
    assert read["value"] is value and read["count"] == 5
    del read
    value = None  # noqa: F841 - the variable is rebound: nothing else may hold the old value
    assert ref() is None
    count += 1
    assert count == 6


def test_a_locals_dict_the_program_kept_and_names_exec_put_stay() -> None:
    kept = _Value()
    mine = locals()
    frames.read_locals(sys._getframe())
    assert mine["kept"] is kept
    exec("made_by_exec = 5")  # noqa: S102 - the program's own exec: its name lives in the copy
    frames.read_locals(sys._getframe())
    assert sys._getframe().f_locals["made_by_exec"] == 5


def test_a_module_namespace_is_only_read() -> None:
    namespace: dict[str, object] = {"frames": frames, "sys": sys}
    exec("kept_here = 1\nread = frames.read_locals(sys._getframe())", namespace)  # noqa: S102
    assert namespace["kept_here"] == 1 and namespace["read"]["kept_here"] == 1  # type: ignore[index]
