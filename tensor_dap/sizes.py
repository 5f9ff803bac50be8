"""Memory sizes as people write them: ``6GiB``, ``512MiB``, ``1.5GB``, ``1000000`` (bytes).

What ``--memory-limit`` and the launch attribute ``tensorMemoryLimit`` take. Binary units
(``KiB``, ``MiB``, ``GiB``, ``TiB``) are powers of 1024, decimal ones (``KB``, ``MB``, ``GB``,
``TB``) powers of 1000, as ``nvidia-smi`` and the drive makers count; ``K``/``M``/``G``/``T``
alone are taken as binary (what PyTorch's own messages mean by them). No torch here: the CLI and
the adapter check a size before anything runs.
"""

from __future__ import annotations

import re
from typing import Any

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


class BadSize(ValueError):
    """A size that cannot be read; its text is the one line the user sees."""


def parse_size(text: Any) -> int:
    """Bytes of ``text`` (a string, or a whole number of bytes); :class:`BadSize` otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        number, unit = float(text), ""
    else:
        match = _SIZE.match(str(text)) if isinstance(text, str) else None
        if match is None or match.group(2).lower() not in _UNITS:
            raise BadSize(
                f"bad memory size {text!r}: a number of bytes, or with a unit as in 6GiB, "
                "512MiB, 1.5GB"
            )
        number, unit = float(match.group(1)), match.group(2).lower()
    nbytes = int(number * _UNITS[unit])
    if nbytes <= 0:
        raise BadSize(f"bad memory size {text!r}: it must be more than 0 bytes")
    return nbytes
