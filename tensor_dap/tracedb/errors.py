"""The one error the trace store raises at its callers.

The agent writes the store from inside a user's process and the language server reads it while
the user types; neither may show a raw ``sqlite3`` traceback for a locked, corrupt, foreign or
too-new file. Every failure of the store is turned into a :class:`TraceStoreError` whose message
names the file and says what to do, so a caller needs a single ``except``.
"""

from __future__ import annotations


class TraceStoreError(Exception):
    """The trace store could not be opened, read or written; the message says why."""
