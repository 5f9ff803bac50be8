"""Output paths given on the command line (``check --report``, ``--trace``, ``trace --output``)
are checked before the script runs: a run of an hour must not end in the tool's own traceback
because its report cannot be written. A missing folder is created; a folder given as the file,
or a place this user cannot write, is refused with one line.
"""

from __future__ import annotations

import os
from typing import Optional


class BadOutputPath(ValueError):
    pass


def prepare(path: Optional[str], what: str) -> None:
    """Make ``path`` writable for the run (its folder created), or raise :class:`BadOutputPath`
    naming ``what`` (``--report``) and why."""
    if not path:
        return
    if os.path.isdir(path):
        raise BadOutputPath(f"{what} {path}: is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        raise BadOutputPath(f"{what} {path}: cannot create {folder}: {_why(error)}") from None
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        raise BadOutputPath(f"{what} {path}: permission denied")


def _why(error: OSError) -> str:
    return error.strerror or str(error)
