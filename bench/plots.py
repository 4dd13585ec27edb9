"""PNG plots of a ``python -m bench`` result; runs from bench/.venv, where matplotlib is.

``bench/.venv/bin/python -m bench.plots results/<date>.json`` writes, next to the JSON:

* ``<date>-throughput.png``: passthrough records/s per competitor and record size,
  bars at the median with min-max whiskers over the rounds;
* ``<date>-latency.png``: p50/p95/p99 end-to-end latency against the achieved input rate,
  one panel per delivery guarantee, with min-max whiskers over the rounds;
* ``<date>-serving.png``: embedded and remote inference records/s (log scale), and the
  digits CNN's configurations with min-max whiskers over its rounds.

Matplotlib lives in the bench virtualenv rather than in streamflow's dev tools: only the
benchmark draws anything. The module reads only the JSON, so any stored result can be
redrawn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter

_COLOURS = {"sf-batch": "#1f77b4", "hand": "#7f7f7f", "quix": "#ff7f0e", "faust": "#2ca02c"}


def throughput(result: dict[str, Any], out: Path) -> Path | None:
    passthrough = result["scenarios"].get("passthrough")
    if not passthrough:
        return None
    sizes = passthrough["settings"]["sizes"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        rows = [
            r
            for r in passthrough["summary"]
            if r["size"] == size and r.get("format", "avro") == "avro"
        ]
        names = [r["competitor"] for r in rows]
        stats = [r["records_per_s"] for r in rows]
        medians = [s["median"] for s in stats]
        whiskers = [
            [s["median"] - s["min"] for s in stats],
            [s["max"] - s["median"] for s in stats],
        ]
        ax.bar(
            names,
            medians,
            yerr=whiskers,
            capsize=6,
            color=[_COLOURS.get(n, "#9467bd") for n in names],
        )
        for index, value in enumerate(medians):
            ax.annotate(
                f"{value / 1000:.1f}k",
                (index, value),
                ha="center",
                va="bottom",
                xytext=(0, 3),
                textcoords="offset points",
                fontsize=8,
            )
        ax.set_title(f"passthrough, {size} B records")
        ax.set_ylabel("records/s (median, min-max)")
    settings = passthrough["settings"]
    fig.suptitle(
        f"Avro passthrough, {settings['records']:,} records, {settings['rounds']} rounds, "
        f"{result['environment']['cores']} cores"
    )
    fig.tight_layout()
    return _save(fig, out, "throughput")


def latency(result: dict[str, Any], out: Path) -> Path | None:
    scenario = result["scenarios"].get("latency")
    if not scenario:
        return None
    summary = [r for r in scenario["summary"] if r.get("competitor", "streamflow") == "streamflow"]
    hand = [r for r in scenario["summary"] if r.get("competitor") == "hand"]
    guarantees = list(dict.fromkeys(r["guarantee"] for r in summary))
    fig, axes = plt.subplots(
        1, len(guarantees), figsize=(5.5 * len(guarantees), 4), squeeze=False, sharey=True
    )
    for ax, guarantee in zip(axes[0], guarantees, strict=True):
        rows = [r for r in summary if r["guarantee"] == guarantee]
        rates = [r["rate"] for r in rows]
        baseline = [r for r in hand if r["guarantee"] == guarantee and "p99_ms" in r]
        if baseline:
            ax.plot(
                [r["rate"] for r in baseline],
                [r["p99_ms"]["median"] for r in baseline],
                ":",
                color="grey",
                label="p99, hand-written loop",
            )
        for key, style in (("p50_ms", "o-"), ("p95_ms", "s--"), ("p99_ms", "^-.")):
            stats = [r[key] for r in rows]
            ax.errorbar(
                rates,
                [s["median"] for s in stats],
                yerr=[
                    [s["median"] - s["min"] for s in stats],
                    [s["max"] - s["median"] for s in stats],
                ],
                fmt=style,
                capsize=4,
                label=key.split("_")[0],
            )
        for row in rows:
            ax.annotate(
                f"{row['fraction']:.0%}",
                (row["rate"], row["p50_ms"]["median"]),
                xytext=(0, -12),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xlabel("input records/s")
        ax.set_title(f"{guarantee} (max {rows[0]['max_rate']:,.0f} records/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel("end-to-end latency, ms")
    fig.suptitle("Ingress produce to egress consume, at 10/50/90% of the maximum rate")
    fig.tight_layout()
    return _save(fig, out, "latency")


def serving(result: dict[str, Any], out: Path) -> Path | None:
    scenario = result["scenarios"].get("serving")
    if not scenario:
        return None
    digits = scenario.get("digits")
    fig, axes = plt.subplots(
        1, 2 if digits else 1, figsize=(16 if digits else 9, 4.5), squeeze=False
    )
    bars = {
        "wine batched": scenario["wine_embedded_batched"],
        "wine batch 1": scenario["wine_embedded_per_record"],
        "wide batched": scenario["wide_embedded_batched"],
        "wide batch 1": scenario["wide_embedded_per_record"],
        "remote V2": scenario["remote_batched_v2"],
        "remote V1": scenario["remote_batched_v1"],
        "remote sync": scenario["remote_naive_sync"],
    }
    colours = ["#1f77b4", "#aec7e8", "#1f77b4", "#aec7e8", "#ff7f0e", "#ff7f0e", "#ffbb78"]
    _bars(axes[0][0], bars, colours)
    axes[0][0].set_title("Flat features: embedded (wine, wide MLP) and remote (KServe)")
    if digits:
        _digits(axes[0][1], digits)
    fig.suptitle(
        f"Inference through streamflow, {result['environment']['cores']} cores", fontsize=11
    )
    fig.tight_layout()
    return _save(fig, out, "serving")


def _digits(ax: Any, digits: dict[str, Any]) -> None:
    """The digits CNN: median records/s per configuration, min-max whiskers over rounds."""
    names = {
        "keras_batched": "Keras\nbatched",
        "keras_per_record": "Keras\nbatch 1",
        "onnx_batched": "ONNX\nbatched",
        "onnx_per_record": "ONNX\nbatch 1",
        "keras_batched_nested": "Keras batched\nnested input",
        "v2_json": "remote V2\nJSON",
        "v2_binary": "remote V2\nbinary",
    }
    colours = ["#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#9467bd", "#ffbb78", "#ff7f0e"]
    stats = [digits["rates"][key] for key in names]
    whiskers = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
    bars = {label: s["median"] for label, s in zip(names.values(), stats, strict=True)}
    _bars(ax, bars, colours, whiskers=whiskers)
    load = digits["load_1m"]
    ax.set_title(
        f"Digits CNN, tensor mapping ({digits['rounds']} rounds, load "
        f"{load['min']:.0f}-{load['max']:.0f})"
    )


def _bars(ax: Any, bars: dict[str, float], colours: list[str], whiskers: Any = None) -> None:
    ax.bar(list(bars), list(bars.values()), color=colours, yerr=whiskers, capsize=4)
    for index, value in enumerate(bars.values()):
        top = value + (whiskers[1][index] if whiskers else 0)  # above the whisker
        ax.annotate(
            f"{value:,.0f}",
            (index, top),
            ha="center",
            va="bottom",
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.3)  # room for the labels
    ax.set_ylabel("records/s (log)")
    ax.tick_params(axis="x", labelsize=8)


def _save(fig: Any, out: Path, name: str) -> Path:
    path = out.with_name(f"{out.stem}-{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    source = Path(argv[0])
    result = json.loads(source.read_text())
    for draw in (throughput, latency, serving):
        path = draw(result, source)
        if path is not None:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
