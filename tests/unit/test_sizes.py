"""Memory sizes as ``--memory-limit`` and ``tensorMemoryLimit`` take them."""

from __future__ import annotations

import pytest

from tensor_dap.sizes import BadSize, parse_size


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("6GiB", 6 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("1.5GB", 1_500_000_000),
        ("1000", 1000),
        (" 12 kib ", 12 * 1024),
        ("2G", 2 * 1024**3),
        ("1TB", 1000**4),
        (4096, 4096),
    ],
)
def test_sizes_people_write(text: object, nbytes: int) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "GiB", "6XB", "-1", "0", "0.0001B", "1e9", None, True])
def test_what_is_not_a_size_is_one_clear_error(text: object) -> None:
    with pytest.raises(BadSize, match="bad memory size"):
        parse_size(text)
