"""Summaries, the Markdown table and the JSON file of a benchmark's runs.

Throughput and CPU are summarised as median and range over rounds, because a
handful of runs on a shared machine has outliers that a mean would smear in.
Ratios to the baseline are paired by round (each run against the baseline run of
the same round) and then the median is taken, so slow drift cancels out. Runs in
a topic format other than single-object Avro are compared with the baseline in
the same format and under the same delivery guarantee, and with themselves in
Avro (:func:`format_costs`). Runs recorded before formats existed are Avro; runs
recorded before guarantees existed are at-least-once.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BASELINE = "hand"
AVRO = "avro"
AT_LEAST_ONCE = "at-least-once"
# The issue's target: a registry format costs no more than 10% over single-object Avro.
FORMAT_COST_TARGET = {"avro-registry": 1.10, "json-registry": 1.10}

_METRICS = ("records_per_s", "cpu_s_per_M", "cpu_total_s_per_M", "inproc_records_per_s")


def format_of(run: dict[str, Any]) -> str:
    return str(run.get("format", AVRO))


def guarantee_of(run: dict[str, Any]) -> str:
    return str(run.get("guarantee", AT_LEAST_ONCE))


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and range of each metric, and each competitor's ratio to the baseline.

    One row per size, format, guarantee and competitor; the baseline is the one in the
    same format under the same guarantee.
    """
    rows: list[dict[str, Any]] = []
    groups = dict.fromkeys((r["size"], format_of(r), guarantee_of(r)) for r in runs)
    order = sorted(groups, key=lambda g: (g[0], g[1] != AVRO, g[1], g[2] != AT_LEAST_ONCE))
    for size, fmt, guarantee in order:
        sized = [
            r
            for r in runs
            if r["size"] == size and format_of(r) == fmt and guarantee_of(r) == guarantee
        ]
        base = {r["round"]: r for r in sized if r["competitor"] == BASELINE}
        for name in dict.fromkeys(r["competitor"] for r in sized):
            mine = [r for r in sized if r["competitor"] == name]
            row: dict[str, Any] = {
                "size": size,
                "format": fmt,
                "guarantee": guarantee,
                "competitor": name,
            }
            for metric in _METRICS:
                values = [r[metric] for r in mine if r[metric] is not None]
                if values:
                    row[metric] = {
                        "median": statistics.median(values),
                        "min": min(values),
                        "max": max(values),
                    }
            if base and name != BASELINE:
                # Paired by round: each ratio compares runs made minutes apart.
                speed = [r["records_per_s"] / base[r["round"]]["records_per_s"] for r in mine]
                cpu = [r["cpu_s_per_M"] / base[r["round"]]["cpu_s_per_M"] for r in mine]
                row["throughput_ratio"] = statistics.median(speed)
                row["cpu_ratio"] = statistics.median(cpu)
            rows.append(row)
    return rows


def format_costs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each competitor in each other format over itself in Avro, paired by round.

    ``cpu_ratio`` is what a record costs in that format over Avro (lower is better),
    ``throughput_ratio`` the records/s (higher is better); ``target`` is the
    highest CPU ratio the issue accepts, where it sets one.
    """
    rows: list[dict[str, Any]] = []
    avro = {
        (r["size"], r["competitor"], guarantee_of(r), r["round"]): r
        for r in runs
        if format_of(r) == AVRO
    }
    groups = dict.fromkeys(
        (r["size"], format_of(r), r["competitor"], guarantee_of(r)) for r in runs
    )
    for size, fmt, name, guarantee in groups:
        paired = [
            (r, avro[(size, name, guarantee, r["round"])])
            for r in runs
            if (r["size"], format_of(r), r["competitor"], guarantee_of(r))
            == (size, fmt, name, guarantee)
            and (size, name, guarantee, r["round"]) in avro
        ]
        if fmt == AVRO or not paired:
            continue
        cpu = statistics.median(r["cpu_s_per_M"] / a["cpu_s_per_M"] for r, a in paired)
        speed = statistics.median(r["records_per_s"] / a["records_per_s"] for r, a in paired)
        target = FORMAT_COST_TARGET.get(fmt) if name != BASELINE else None  # streamflow's
        rows.append(
            {
                "size": size,
                "format": fmt,
                "guarantee": guarantee,
                "competitor": name,
                "cpu_ratio": cpu,
                "throughput_ratio": speed,
                "target": target,
                "met": cpu <= target if target else None,
            }
        )
    return rows


def markdown(result: dict[str, Any]) -> str:
    def cell(row: dict[str, Any], metric: str, fmt: str) -> str:
        stats = row.get(metric)
        if not stats:
            return "-"
        return f"{stats['median']:{fmt}} ({stats['min']:{fmt}}-{stats['max']:{fmt}})"

    settings = result["settings"]
    lines = [
        f"N = {settings['records']:,} records, {settings['rounds']} rounds, "
        f"batch {settings['batch_size']}, {settings['partitions']} partitions; "
        "median (min-max)",
        "",
        "| size | format | guarantee | competitor | records/s | CPU s / M records "
        "| CPU s / M incl. start-up | in-process records/s | throughput ratio | CPU ratio |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["summary"]:
        ratio = f"{row['throughput_ratio']:.2f}" if "throughput_ratio" in row else "1"
        cpu_ratio = f"{row['cpu_ratio']:.2f}" if "cpu_ratio" in row else "1"
        lines.append(
            f"| {row['size']} B | {row.get('format', AVRO)} "
            f"| {row.get('guarantee', AT_LEAST_ONCE)} | {row['competitor']} "
            f"| {cell(row, 'records_per_s', ',.0f')} "
            f"| {cell(row, 'cpu_s_per_M', '.1f')} | {cell(row, 'cpu_total_s_per_M', '.1f')} "
            f"| {cell(row, 'inproc_records_per_s', ',.0f')} | {ratio} | {cpu_ratio} |"
        )
    lines += [
        "",
        f"Throughput ratio: records/s over {BASELINE}'s in the same format, under the same "
        "guarantee (higher is better). "
        f"CPU ratio: CPU per record over {BASELINE}'s (lower is better). Both paired by round, "
        "then the median.",
        _machine_note(result),
    ]
    costs = result.get("format_costs") or []
    if costs:
        lines += [
            "",
            "What a format costs over single-object Avro (the same competitor, paired by round):",
            "",
            "| size | format | guarantee | competitor | CPU per record | records/s "
            "| target (CPU) |",
            "|---:|---|---|---|---:|---:|---|",
        ]
        for row in costs:
            target = row.get("target")
            verdict = "" if row.get("met") is None else (" met" if row["met"] else " missed")
            lines.append(
                f"| {row['size']} B | {row['format']} "
                f"| {row.get('guarantee', AT_LEAST_ONCE)} | {row['competitor']} "
                f"| {row['cpu_ratio']:.2f}x | {row['throughput_ratio']:.2f}x "
                f"| {f'<= {target:.2f}x{verdict}' if target else '-'} |"
            )
    return "\n".join(lines)


def _machine_note(result: dict[str, Any]) -> str:
    """How busy the machine was: a competitor bound by a saturated machine measures that."""
    runs = result["runs"]
    busy = [r["machine_busy"] for r in runs if "machine_busy" in r]
    load = [r["loadavg_1m_after"] for r in runs if "loadavg_1m_after" in r]
    if not busy or not load:
        return ""
    return (
        f"Machine ({result['environment']['cores']} cores) busy during runs: "
        f"{min(busy):.0%}-{max(busy):.0%}; 1-min load average {min(load):.1f}-{max(load):.1f}."
    )


def write(result: dict[str, Any], *, stem: str) -> Path:
    """``results/<stem>-<date>.json``, never overwriting an earlier run of the same day."""
    RESULTS_DIR.mkdir(exist_ok=True)
    stem = f"{stem}-{dt.date.today().isoformat()}"
    path, n = RESULTS_DIR / f"{stem}.json", 1
    while path.exists():  # keep earlier runs of the same day
        n += 1
        path = RESULTS_DIR / f"{stem}-{n}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
