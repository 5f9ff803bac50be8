"""Rules switched on while the program runs (the debugger's checkboxes).

The new rule set applies at once (:meth:`~tensor_dap.agent.engine.Watch.set_enabled`). A watch
with no rule on at launch installed nothing; it starts when the first rule is ticked, on the
main thread, where the program's ops run — a torch-function mode is per thread and the rules
arrive on the agent's channel thread, so a real-time signal (POSIX) asks the main thread to
start it. Used by the debug adapter's agent (:mod:`tensor_dap.agent.debuggee`) and by child
processes under the debugger (:mod:`tensor_dap.agent.child`).
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch


class Starter:
    """Installs the watch on the main thread when the first rule is enabled while running.

    Made on the main thread (it sets a signal handler: ``ValueError`` elsewhere).
    """

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.signal: Optional[int] = None
        if hasattr(signal, "SIGRTMIN") and hasattr(signal, "pthread_kill"):
            self.signal = signal.SIGRTMIN + 7
            signal.signal(self.signal, lambda *_: self.watch.start())

    def rules_changed(self, rules: list[str]) -> None:
        self.watch.set_enabled(rules)
        if rules:
            self.wake()

    def wake(self) -> None:
        """Start the watch on the main thread, if it did not run (from another thread)."""
        main = threading.main_thread()
        if (
            self.signal is not None
            and main.ident is not None
            and threading.current_thread() is not main
        ):
            signal.pthread_kill(main.ident, self.signal)


def rules_callback(watch: Watch) -> Callable[[list[str]], None]:
    """What to call with each new rule set: a :class:`Starter`'s where one can be set up, else
    the watch's ``set_enabled`` (not on the main thread: signals cannot be set up there)."""
    try:
        return Starter(watch).rules_changed
    except ValueError:
        return watch.set_enabled
