"""The digits example's heat map: an image Explanation drawn as a PNG, checked pixel by pixel."""

from __future__ import annotations

import importlib.util
import json
import struct
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

SCRIPT = Path(__file__).parents[3] / "blueprints" / "digits" / "heatmap.py"


@pytest.fixture(scope="module")
def heatmap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("digits_heatmap", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _explanation() -> dict[str, Any]:
    pixels = np.linspace(0, 1, 64).reshape(8, 8)
    attributions = np.zeros((8, 8))
    attributions[3, 4], attributions[0, 0] = 0.5, -0.25
    return {
        "input": "image",
        "shape": [8, 8, 1],
        "target": 7,
        "attributions": [
            {"feature": f"image[{r},{c},0]", "value": pixels[r, c], "attribution": a}
            for (r, c), a in np.ndenumerate(attributions)
        ],
    }


def _cell(rgb: np.ndarray, heatmap: ModuleType, row: int, column: int) -> list[int]:
    """The colour at the centre of one cell of the right panel."""
    scale = heatmap.SCALE
    x = 8 * scale + heatmap.GAP + column * scale + scale // 2
    return rgb[row * scale + scale // 2, x].tolist()  # type: ignore[no-any-return]


def test_red_raised_the_class_blue_lowered_it_white_did_nothing(heatmap: ModuleType) -> None:
    rgb = heatmap.render(_explanation())
    scale = heatmap.SCALE
    assert rgb.shape == (8 * scale, 16 * scale + heatmap.GAP, 3)
    assert _cell(rgb, heatmap, 3, 4) == [255, 0, 0]  # the largest attribution: full red
    assert _cell(rgb, heatmap, 0, 0) == [128, 128, 255]  # half as large, negative: blue
    assert _cell(rgb, heatmap, 5, 5) == [255, 255, 255]
    assert rgb[scale // 2, scale // 2].tolist() == [255, 255, 255]  # pixel 0: no ink
    assert rgb[-1, 8 * scale - 1].tolist() == [0, 0, 0]  # pixel 63: full ink


def test_the_png_holds_exactly_the_picture(heatmap: ModuleType) -> None:
    rgb = heatmap.render(_explanation())
    data = heatmap.png(rgb)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (height, width) == rgb.shape[:2]
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41 : 41 + length])
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + width * 3)
    assert set(rows[:, 0].tolist()) == {0}
    np.testing.assert_array_equal(rows[:, 1:].reshape(rgb.shape), rgb)


def test_it_draws_from_tail_output_and_refuses_what_is_not_an_image(
    heatmap: ModuleType, tmp_path: Path
) -> None:
    flat = {**_explanation(), "input": "features", "shape": [64]}
    source = tmp_path / "tail.jsonl"
    lines = [{"offset": 0, "value": flat}, {"offset": 1, "value": _explanation()}]
    source.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "x.png"
    assert heatmap.main([str(source), "--out", str(out)]) == 0
    assert out.read_bytes() == heatmap.png(heatmap.render(_explanation()))
    assert heatmap.main([str(source), "--out", str(out), "--index", "1"]) == 1
    with pytest.raises(ValueError, match="is not an image"):
        heatmap.grids(flat)
