"""Run a user's script exactly as ``python script.py args...`` would.

``__name__ == "__main__"``, ``sys.argv``, ``sys.path[0]`` = the script's folder, stdout and
stderr untouched. What the script did at the end — returned, called ``sys.exit``, raised — comes
back as :class:`ExitInfo` instead of escaping, so the caller can still report and flush.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import signal
import sys
import threading
import traceback
import types
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

_TENSOR_DAP_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: Python's own hook for a thread's uncaught exception (``threading.__excepthook__`` is 3.10+;
#: on 3.9 the hook as this module found it, before any script ran)
_PYTHONS_THREAD_HOOK = getattr(threading, "__excepthook__", threading.excepthook)


@dataclass
class ExitInfo:
    """How the script ended: ``status`` is ``ok``, ``exit`` (sys.exit) or ``exception``."""

    status: str
    code: int
    exception: Optional[str] = None
    #: `` at train.py:4``: the script's line that raised (not in the report's JSON)
    where: str = ""

    def summary(self) -> Optional[str]:
        """One line for the end of a report when the script failed (``None`` when it did not):
        ``the script failed: exit 3``, ``the script failed: RuntimeError: ...``."""
        if not self.failed:
            return None
        if self.status == "exception" and self.exception:
            name, _, message = self.exception.partition(":")
            lines = message.strip().splitlines()
            first = f"{name}{self.where}: {lines[0] if lines else ''}".rstrip(": ")
            return f"the script failed: {first[:200]}"
        if self.status == "signal":
            return f"the program was {self.exception or 'killed'}"
        return f"the script failed: exit {self.code}"

    @property
    def failed(self) -> bool:
        return self.code != 0

    def to_json(self) -> dict[str, Any]:
        found = asdict(self)
        del found["where"]
        return found


def run_script(
    path: str,
    args: list[str],
    reraise: bool = False,
    on_raise: Optional[Callable[[], None]] = None,
) -> ExitInfo:
    """Run ``path`` as ``__main__`` with ``args``; print a failure as Python would.

    ``reraise``: let an exception escape instead (under a debugger, so that its "uncaught
    exception" breakpoint sees it as uncaught). ``on_raise``: called when the script raised,
    before its frames (and what their variables hold) are let go.
    """
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [path, *args]  # as given, like python does
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)
    saved_main = sys.modules.get("__main__")
    if threading.excepthook is _PYTHONS_THREAD_HOOK:
        threading.excepthook = _thread_excepthook
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__dict__["__builtins__"] = builtins
    main.__spec__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)  # (as python's)
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__dict__["__annotations__"] = {}
    sys.modules["__main__"] = main  # classes defined in the script pickle as __main__.X
    try:
        with io.open_code(path) as source_file:
            code = compile(source_file.read(), path, "exec", dont_inherit=True)
        exec(code, main.__dict__)
        return ExitInfo("ok", 0)
    except SystemExit as stop:
        return _exit_info(stop)
    except BaseException as error:  # noqa: BLE001 - everything the script raised is reported
        if on_raise is not None:
            on_raise()
        if reraise:
            raise
        try:
            print_user_traceback(error)
        except SystemExit as stop:  # the program's excepthook ended it
            return _exit_info(stop)
        status = 130 if isinstance(error, KeyboardInterrupt) else 1  # as Python's exit status
        return ExitInfo("exception", status, f"{type(error).__name__}: {error}", _where(error))
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


def end_as_interrupted(exit_info: ExitInfo) -> None:
    """After the report: a script ended by an uncaught ``KeyboardInterrupt`` ends the process by
    ``SIGINT``, as Python does (a parent waiting on it sees death by signal, a shell 130)."""
    interrupted = exit_info.status == "exception" and (exit_info.exception or "").startswith(
        "KeyboardInterrupt"
    )
    if interrupted and os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def _where(error: BaseException) -> str:
    """`` at train.py:4``: the user's last line in the traceback (a SyntaxError's own line)."""
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return f" at {os.path.basename(error.filename)}:{error.lineno}"
    from tensor_dap.agent.frames import is_user_code  # (loads torch: only once it failed)

    tb, last = error.__traceback__, None
    while tb is not None:  # the user's last line, not torch's (``loss.backward()``)
        if is_user_code(tb.tb_frame.f_code):
            last = tb
        tb = tb.tb_next
    if last is None:
        return ""
    return f" at {os.path.basename(last.tb_frame.f_code.co_filename)}:{last.tb_lineno}"


def _exit_info(stop: SystemExit) -> ExitInfo:
    code = stop.code
    if code is None:
        return ExitInfo("exit", 0)
    if isinstance(code, int):
        return ExitInfo("exit", code)
    print(code, file=sys.stderr)  # sys.exit("message") prints the message, exits 1
    return ExitInfo("exit", 1, str(code))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    """What Python prints for an exception that ends a thread, without tensor-dap's frames
    (the engine watches threads too, so its hook sits between the user's line and torch)."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else threading.get_ident()
    sys.stderr.write(f"Exception in thread {name}:\n")
    if args.exc_value is None:
        _PYTHONS_THREAD_HOOK(args)
        return
    print_user_traceback(args.exc_value, hook=False)


def print_user_traceback(error: BaseException, hook: bool = True) -> None:
    """The traceback Python would print, without tensor-dap's own frames; through the
    program's ``sys.excepthook`` when it set one and ``hook`` (an uncaught error of the main
    thread: a thread's goes to ``threading.excepthook`` alone), as Python would."""
    from tensor_dap.agent.dispatch_frames import handed_over, is_dispatch

    tb = error.__traceback__
    frames: list[types.TracebackType] = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_dispatch(code):
            # ``F.cross_entropy`` handing itself to the watch: that frame and the call line of
            # the function above it exist only because a mode is on; the function runs again
            # below, as it does without tensor-dap
            if frames:
                frames.pop()
        elif tb.tb_next is not None and handed_over(code, tb.tb_lineno, tb.tb_next.tb_frame.f_code):
            pass  # (the same, through the watch's shortcut: no handle_torch_function frame)
        elif not code.co_filename.startswith(_TENSOR_DAP_DIR):
            frames.append(tb)
        tb = tb.tb_next
    # rebuild the chain of kept frames
    head: Optional[types.TracebackType] = None
    for kept in reversed(frames):
        head = types.TracebackType(head, kept.tb_frame, kept.tb_lasti, kept.tb_lineno)
    own = sys.excepthook
    if hook and own is not sys.__excepthook__:  # the program's own (rich.traceback.install())
        try:  # (a SystemExit it raises ends the program, as Python's: run_script takes it)
            own(type(error), error.with_traceback(head), head)
            return
        except Exception as failed:  # as Python does when the hook itself raises
            sys.stderr.write("Error in sys.excepthook:\n")
            hook_frames = failed.__traceback__.tb_next if failed.__traceback__ else None
            shown = traceback.format_exception(type(failed), failed, hook_frames, chain=False)
            sys.stderr.write("".join(shown))
            sys.stderr.write("\nOriginal exception was:\n")
    lines = traceback.format_exception(type(error), error, head)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
