"""The digest of a source file's text, computed the same way by the agent and the language server.

The agent records the digest of each file it observed; the language server compares it with the
text of the open buffer and drops hints recorded for another version of the file. Both sides must
hash the same bytes, so line endings are normalised (an editor buffer keeps ``\\r\\n``, a file read
in text mode does not) and the text is encoded as UTF-8.
"""

from __future__ import annotations

import hashlib
import os
from typing import Union


def text_digest(text: str) -> str:
    """The sha1 hex digest of ``text`` with line endings normalised to ``\\n``."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    return hashlib.sha1(normalised.encode("utf-8", "surrogateescape")).hexdigest()


def source_text(path: Union[str, os.PathLike[str]]) -> str:
    """A UTF-8 source file's contents, undecodable bytes kept as surrogates."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        return handle.read()


def file_digest(path: Union[str, os.PathLike[str]]) -> str:
    """The :func:`text_digest` of a UTF-8 source file's contents."""
    return text_digest(source_text(path))
