"""tensor_dap.render.picture: the "View Tensor" payload — slice choice, on-device downsampling to
at most 65,536 values, histogram and NaN/Inf counts, exotic tensors, and never disturbing the
debuggee (no version bump, no graph, no rule firing)."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import pytest
import torch

import tensor_dap
from tensor_dap.render.picture import MAX_VALUES, choose_slice, encode, picture, pool_factors
from tensor_dap.testing import accelerator_device


def pixels(data: dict[str, Any]) -> torch.Tensor:
    """The payload's values as an (H, W, C) tensor, decoded as the extension decodes them."""
    raw = base64.b64decode(data["values"])
    count = len(raw) // 4
    assert count == data["height"] * data["width"] * data["channels"]
    values = struct.unpack(f"<{count}f", raw)
    return torch.tensor(values).reshape(data["height"], data["width"], data["channels"])


def test_small_matrix_is_sent_whole() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    data = json.loads(encode(x))
    assert (data["kind"], data["layout"], data["slice"]) == ("heatmap", "heatmap", "")
    assert (data["shape"], data["dtype"], data["device"]) == ([3, 4], "float32", "cpu")
    assert (data["height"], data["width"], data["channels"], data["block"]) == (3, 4, 1, [1, 1])
    assert torch.equal(pixels(data)[..., 0], x)
    assert (data["min"], data["max"], data["nan"], data["posinf"], data["neginf"]) == (
        0,
        11,
        0,
        0,
        0,
    )
    assert sum(data["histogram"]["counts"]) == 12 and data["histogram"]["bins"] == 64


def test_histogram_bins_over_finite_values_and_counts_nan_inf() -> None:
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, math.nan, math.inf, -math.inf, math.nan])
    data = picture(x, bins=4)
    assert data["histogram"] == {"bins": 4, "lo": 0.0, "hi": 3.0, "counts": [1, 1, 1, 1]}
    assert (data["nan"], data["posinf"], data["neginf"]) == (2, 1, 1)
    assert (data["min"], data["max"]) == (0.0, 3.0)
    drawn = pixels(data)[0, :, 0]
    assert drawn[:4].tolist() == [0, 1, 2, 3]
    assert math.isnan(drawn[4]) and drawn[5] == math.inf and drawn[6] == -math.inf


def test_all_nan_has_no_range_and_no_histogram() -> None:
    data = json.loads(encode(torch.full((5,), math.nan)))
    assert data["min"] is None and data["max"] is None and data["nan"] == 5
    assert data["histogram"]["counts"] == []


def test_constant_tensor_has_a_histogram() -> None:
    data = picture(torch.full((2, 2), 7.0), bins=8)
    assert sum(data["histogram"]["counts"]) == 4
    assert data["histogram"]["lo"] < 7 < data["histogram"]["hi"]


@pytest.mark.parametrize(
    "shape",
    [(1000, 700), (1, 1_000_000), (1_000_000, 1), (257, 255), (3, 4096, 4096), (50_000, 3)],
)
def test_big_slices_are_averaged_down_to_the_limit(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    data = picture(x)
    assert data["height"] * data["width"] * data["channels"] <= MAX_VALUES
    assert len(encode(x)) < 500_000
    fh, fw = data["block"]
    if data["layout"] == "heatmap":
        assert data["height"] == math.ceil(shape[-2] / fh)
        assert data["width"] == math.ceil(shape[-1] / fw)


@pytest.mark.parametrize("limit", [16, 100, 1000])
def test_any_slice_fits_any_limit(limit: int) -> None:
    for height in (1, 7, 257, 1031):
        for width in (1, 17, 999, 2003):
            for channels in (1, 3):
                x = (
                    torch.zeros(channels, height, width)
                    if channels == 3
                    else torch.zeros(height, width)
                )
                data = picture(x, max_values=limit)
                assert data["height"] * data["width"] * data["channels"] <= max(limit, channels)


def test_downsampling_averages_blocks() -> None:
    rows = torch.arange(1024.0).repeat_interleave(1024).reshape(1024, 1024)  # value = row index
    data = picture(rows)
    fh, fw = data["block"]
    assert fh > 1 and fw > 1
    drawn = pixels(data)[..., 0]
    expected = torch.arange(1024.0).reshape(-1, fh).mean(dim=1) if 1024 % fh == 0 else None
    if expected is not None:
        assert torch.allclose(drawn[:, 0], expected)
    assert torch.allclose(drawn[:, 0], drawn[:, -1])  # every column block the same


@pytest.mark.parametrize(
    ("height", "width", "limit"),
    [(10, 10, 100), (11, 10, 100), (1, 10**8, 65536), (10**8, 1, 65536), (3000, 7, 65536)]
    + [(h, w, 65536) for h in (1, 2, 255, 256, 257, 4097) for w in (1, 3, 256, 65537, 99991)],
)
def test_pool_factors_fit_the_limit(height: int, width: int, limit: int) -> None:
    fh, fw = pool_factors(height, width, limit)
    assert fh >= 1 and fw >= 1
    assert math.ceil(height / fh) * math.ceil(width / fw) <= limit
    if height * width <= limit:
        assert (fh, fw) == (1, 1)


def test_slice_choice() -> None:
    assert choose_slice([]) == ((), "heatmap")
    assert choose_slice([7]) == ((), "heatmap")
    assert choose_slice([4, 5]) == ((), "heatmap")
    assert choose_slice([2, 4, 5]) == ((0,), "heatmap")
    assert choose_slice([3, 32, 32]) == ((), "chw")
    assert choose_slice([32, 32, 3]) == ((), "hwc")
    assert choose_slice([8, 3, 32, 32]) == ((0,), "chw")
    assert choose_slice([2, 2, 4, 5]) == ((0, 0), "heatmap")


def test_image_channels_come_out_last() -> None:
    chw = torch.zeros(2, 3, 4, 5)
    chw[0, 0], chw[0, 1], chw[0, 2] = 0.25, 0.5, 1.0
    chw[1] = 9  # another slice: not drawn
    data = picture(chw)
    assert (data["kind"], data["layout"], data["slice"]) == ("image", "chw", "[0, :, :, :]")
    assert (data["height"], data["width"], data["channels"]) == (4, 5, 3)
    assert pixels(data)[2, 3].tolist() == [0.25, 0.5, 1.0]
    hwc = chw[0].permute(1, 2, 0).contiguous()
    data = picture(hwc)
    assert (data["kind"], data["layout"]) == ("image", "hwc")
    assert pixels(data)[1, 1].tolist() == [0.25, 0.5, 1.0]


def test_higher_rank_heatmap_is_the_first_slice() -> None:
    x = torch.arange(2 * 2 * 4 * 5.0).reshape(2, 2, 4, 5)
    data = picture(x)
    assert data["slice"] == "[0, 0, :, :]"
    assert torch.equal(pixels(data)[..., 0], x[0, 0])
    assert sum(data["histogram"]["counts"]) == x.numel()  # the histogram covers it all


def test_vector_and_scalar_are_strips() -> None:
    data = picture(torch.arange(10))
    assert (data["height"], data["width"], data["dtype"]) == (1, 10, "int64")
    assert pixels(data)[0, :, 0].tolist() == list(range(10))
    data = picture(torch.tensor(2.5))
    assert (data["height"], data["width"], data["shape"]) == (1, 1, [])
    assert pixels(data).item() == 2.5


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: torch.tensor([True, False, True]), {"min": 0.0, "max": 1.0}),
        (lambda: torch.tensor([3 + 4j, 0j]), {"magnitude": True, "max": 5.0}),
        (lambda: torch.tensor([1, 2], dtype=torch.uint8), {"dtype": "uint8"}),
        (lambda: torch.tensor([1.5, 2.5], dtype=torch.bfloat16), {"max": 2.5}),
        (lambda: torch.tensor([1.5, 2.5], dtype=torch.float16), {"min": 1.5}),
        (lambda: torch.tensor([1e300, -1e300], dtype=torch.float64), {"max": 1e300}),
    ],
)
def test_other_dtypes_draw(make: Any, expected: dict[str, Any]) -> None:
    data = picture(make())
    assert "error" not in data
    for key, value in expected.items():
        assert data[key] == value


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: torch.zeros(0, 3), "empty"),
        (lambda: torch.empty(3, device="meta"), "meta"),
        (lambda: torch.eye(3).to_sparse(), "sparse"),
        (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8), "quantized"),
        (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested"),
        (lambda: [1, 2, 3], "not a tensor"),
        (lambda: None, "not a tensor"),
    ],
)
def test_what_cannot_be_drawn_says_why(make: Any, error: str) -> None:
    text = encode(make())
    data = json.loads(text)
    assert error in data["error"]


def test_broken_subclass_gives_an_error_not_an_exception() -> None:
    class Broken(torch.Tensor):
        @property
        def shape(self) -> Any:
            raise RuntimeError("no shape for you")

    class Raising(torch.Tensor):
        @classmethod
        def __torch_function__(cls, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("broken")

    data = json.loads(encode(torch.ones(2, 2).as_subclass(Broken)))
    assert data["shape"] == []  # unreadable metadata; the data itself still draws
    assert pixels(data).tolist() == [[[1.0], [1.0]], [[1.0], [1.0]]]
    data = json.loads(encode(torch.ones(2, 2).as_subclass(Raising)))
    assert "error" in data or data["height"] == 2


def test_numpy_arrays_draw() -> None:
    numpy = pytest.importorskip("numpy")
    data = picture(numpy.arange(6, dtype="float32").reshape(2, 3))
    assert pixels(data)[..., 0].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_autograd_state_is_untouched() -> None:
    leaf = torch.randn(300, 300, requires_grad=True)
    nonleaf = leaf * 2
    saved = leaf.exp()  # exp saves its output for backward
    before = [(t._version, t.requires_grad, t.grad_fn, t.is_leaf) for t in (leaf, nonleaf, saved)]
    for t in (leaf, nonleaf, saved):
        data = picture(t)
        assert "error" not in data
    after = [(t._version, t.requires_grad, t.grad_fn, t.is_leaf) for t in (leaf, nonleaf, saved)]
    assert after == before
    saved.sum().backward()  # the graph still works: nothing saved was modified
    assert leaf.grad is not None


def test_no_rule_fires_and_accelerator_tensors_draw() -> None:
    device = accelerator_device()
    x = torch.arange(6.0).reshape(2, 3).to(device)
    found: list[Any] = []
    with tensor_dap.watch(rules="all", on_finding=lambda finding, frame: found.append(finding)):
        data = picture(x)
    assert found == []
    assert data["device"] == str(device)
    assert pixels(data)[..., 0].tolist() == [[0, 1, 2], [3, 4, 5]]
    big = torch.randn(700, 700).to(device)
    data = picture(big)
    assert data["height"] * data["width"] <= MAX_VALUES
    assert sum(data["histogram"]["counts"]) == 700 * 700
