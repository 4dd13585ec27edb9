"""Draw one digit's Explanation as a PNG: the image beside its attributions as a heat map.

An ``Explanation`` of an image carries its input's ``shape`` ([8, 8, 1]) and
the attributions flattened row-major, so the grid comes back with one
reshape. The left panel is the image as the model saw it (the attributions'
``value``), the right panel each pixel's attribution: red raised the
explained class's score, blue lowered it, white did nothing; the colour scale
is symmetric about zero so the two sides compare.

The PNG is written with numpy and zlib alone (no plotting library), so the
script runs wherever the example does. It reads JSON lines, either bare
Explanations or ``streamflow tail -o json`` envelopes, and draws the first one
for an image input (or the ``--index``-th)::

    streamflow tail blueprints/digits/monitored.yaml digit-explanations -n 1 -o json \\
        | python blueprints/digits/heatmap.py --out explanation.png
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["grids", "main", "png", "render"]

SCALE = 32  # screen pixels per image pixel
GAP = 8


def grids(explanation: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(image, attributions) as 2-D grids, from an Explanation of an image input."""
    shape = list(explanation.get("shape") or [])
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] != 1):
        raise ValueError(f"input {explanation.get('input')!r} of shape {shape} is not an image")
    items = explanation["attributions"]
    image = np.array([a["value"] for a in items], dtype=np.float64).reshape(shape[:2])
    attributions = np.array([a["attribution"] for a in items], dtype=np.float64)
    return image, attributions.reshape(shape[:2])


def render(explanation: dict[str, Any]) -> np.ndarray:
    """An RGB picture (height, width, 3) of uint8: the image, a gap, the heat map."""
    image, attributions = grids(explanation)
    span = float(np.ptp(image)) or 1.0
    grey = 1.0 - (image - image.min()) / span  # ink is dark
    left = np.repeat(grey[..., None], 3, axis=2)
    bound = float(np.abs(attributions).max()) or 1.0
    signed = attributions / bound  # -1 .. 1
    red = np.where(signed < 0, 1.0 + signed, 1.0)
    blue = np.where(signed > 0, 1.0 - signed, 1.0)
    green = 1.0 - np.abs(signed)
    right = np.stack([red, green, blue], axis=2)
    gap = np.ones((image.shape[0], 1, 3))
    picture = np.concatenate([left, gap, right], axis=1)
    big = picture.repeat(SCALE, axis=0).repeat(SCALE, axis=1)
    big = np.delete(big, np.s_[image.shape[1] * SCALE + GAP : (image.shape[1] + 1) * SCALE], 1)
    return np.asarray(np.round(big * 255), dtype=np.uint8)


def png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``rgb``."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))  # filter: none

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _explanations(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        if line.strip():
            doc = json.loads(line)
            value = doc.get("value", doc) if isinstance(doc, dict) else None
            if isinstance(value, dict) and len(value.get("shape") or []) in (2, 3):
                yield value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", default="-", help="JSON lines; - for stdin")
    parser.add_argument("--out", default="explanation.png", help="the PNG to write")
    parser.add_argument("--index", type=int, default=0, help="which image explanation to draw")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.source == "-" else Path(args.source).read_text("utf-8")
    found = list(_explanations(text.splitlines()))
    if len(found) <= args.index:
        print(f"found {len(found)} explanation(s) of an image input; nothing to draw")
        return 1
    chosen = found[args.index]
    Path(args.out).write_bytes(png(render(chosen)))
    print(
        f"{args.out}: record {chosen.get('key') or chosen.get('offset')}, model "
        f"{chosen.get('model')}:{chosen.get('model_version')}, class {chosen.get('target')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
