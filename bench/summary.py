"""The headline ratios and the Markdown report of a whole ``python -m bench`` run.

Pure functions of the result dict, so a report can be rebuilt from any stored JSON
(``python -m bench.summary results/<date>.json`` rewrites ``<date>.md``). Ratios
between competitors are paired by round (each against the other's run of the same
round) and then the median is taken, so slow drift of a shared machine cancels out.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import report, transactions

SF = "sf-batch"
LINEAGE = "sf-lineage"  # sf-batch as the blueprint's default runs it: lineage headers copied
DIGITS_HEADLINE = {
    "keras_batched_vs_per_record": "digits CNN, embedded batched / per record (Keras)",
    "onnx_vs_keras_batched": "digits CNN, ONNX / Keras, batched",
    "v2_binary_vs_json": "digits CNN, remote V2 binary / V2 JSON",
}
# (configuration, how the table names it), in table order
DIGITS_ROWS = [
    ("keras_batched", "embedded Keras, batches of 500"),
    ("keras_per_record", "embedded Keras, batch of 1"),
    ("onnx_batched", "embedded ONNX, batches of 500"),
    ("onnx_per_record", "embedded ONNX, batch of 1"),
    ("keras_batched_nested", "embedded Keras, batches of 500, nested-array input"),
    ("v2_json", "remote V2 (KServe), JSON"),
    ("v2_binary", "remote V2 (KServe), binary tensors"),
]


def _paired(
    runs: list[dict[str, Any]],
    mine: str,
    theirs: str,
    size: int,
    metric: str,
    guarantee: str = report.AT_LEAST_ONCE,
) -> float:
    """Median over rounds of mine/theirs for ``metric``, at one record size and guarantee,
    in Avro."""
    runs = [
        r
        for r in runs
        if report.format_of(r) == report.AVRO and report.guarantee_of(r) == guarantee
    ]
    base = {r["round"]: r[metric] for r in runs if r["competitor"] == theirs and r["size"] == size}
    ratios = [
        r[metric] / base[r["round"]]
        for r in runs
        if r["competitor"] == mine and r["size"] == size and r["round"] in base
    ]
    return statistics.median(ratios) if ratios else float("nan")


def headline(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ratios the issue asks for, each with its target and whether it was met."""
    rows: list[dict[str, Any]] = []
    scenarios = result["scenarios"]

    def add(name: str, value: float, target: str, met: bool | None) -> None:
        rows.append({"ratio": name, "value": value, "target": target, "met": met})

    if passthrough := scenarios.get("passthrough"):
        runs = passthrough["runs"]
        competitors = {r["competitor"] for r in runs}
        guarantees = dict.fromkeys(report.guarantee_of(r) for r in runs)
        for size in passthrough["settings"]["sizes"]:
            for guarantee in guarantees:
                for peer, target in (("hand", 0.9), ("quix", 2.0), ("faust", None)):
                    if peer not in competitors:
                        continue
                    speed = _paired(runs, SF, peer, size, "records_per_s", guarantee)
                    cpu = _paired(runs, peer, SF, size, "cpu_s_per_M", guarantee)
                    if speed != speed:  # NaN: this peer did not run under this guarantee
                        continue
                    goal = f">= {target:g}x" if target else "-"
                    met = speed >= target if target else None
                    where = f"{size} B, {guarantee}"
                    add(f"streamflow / {peer}, {where}: throughput", speed, goal, met)
                    add(f"{peer} / streamflow, {where}: CPU per record", cpu, "-", None)
                if {LINEAGE, "hand"} <= competitors:
                    # the blueprint's default: each input's headers read for `streamflow score`
                    speed = _paired(runs, LINEAGE, "hand", size, "records_per_s", guarantee)
                    if speed == speed:
                        name = f"streamflow with lineage / hand, {size} B, {guarantee}: throughput"
                        add(name, speed, "-", None)
        for cost in passthrough.get("format_costs") or []:
            if cost["competitor"] == SF:
                target = cost["target"]
                add(
                    f"streamflow {cost['format']} / avro, {cost['size']} B, {cost['guarantee']}: "
                    "CPU per record",
                    cost["cpu_ratio"],
                    f"<= {target:g}x" if target else "-",
                    cost["met"],
                )
    if serving := scenarios.get("serving"):
        ratios = serving["ratios"]
        for name in ("wine", "wide"):
            value = ratios[f"{name}_embedded_batched_vs_per_record"]
            add(f"embedded batched / per record ({name})", value, ">= 50x", value >= 50)
        for proto in ("v2", "v1"):
            value = ratios[f"remote_batched_{proto}_vs_naive"]
            add(f"remote batched {proto.upper()} / sync per record", value, ">= 10x", value >= 10)
        if digits := serving.get("digits"):
            for key, name in DIGITS_HEADLINE.items():
                add(name, digits["ratios"][key], "-", None)
    if latency := scenarios.get("latency"):
        for row in latency["summary"]:
            who, guarantee = row.get("competitor", "streamflow"), row["guarantee"]
            if who != "streamflow" or "p99_ms" not in row:
                continue
            if row["fraction"] == 0.1 and guarantee == "at-least-once":  # the targets
                p50, p99 = row["p50_ms"]["median"], row["p99_ms"]["median"]
                add("p50 latency at 10% of max, at-least-once (ms)", p50, "<= 10 ms", p50 <= 10)
                add("p99 latency at 10% of max, at-least-once (ms)", p99, "<= 25 ms", p99 <= 25)
            if row["fraction"] == 0.9 and row.get("output_rate"):
                kept = row["output_rate"] / row["rate"]
                add(f"output / input rate at 90% of max, {guarantee}", kept, "-", None)
    if score := scenarios.get("score"):
        add("streamflow score / hand-written loop: rows/s", score["summary"]["ratio"], "-", None)
    return rows


def markdown(result: dict[str, Any], *, plots: list[str] | None = None) -> str:
    env = result["environment"]
    lines = [
        f"# streamflow benchmarks, {result['date'][:10]}",
        "",
        f"Machine: {env['cores']} cores, {env['cpu_model']}, {env['platform']}; "
        f"broker: {result['settings']['broker']}. Python {env['python']}, "
        f"git {env['git_commit'][:10]}{' (dirty)' if env['git_dirty'] else ''}.",
        f"Command: `{result['settings']['command']}`",
        "",
        "## Headline ratios",
        "",
        "| ratio | value | target | met |",
        "|---|---:|---|---|",
    ]
    for row in headline(result):
        met = {True: "yes", False: "**no**", None: ""}[row["met"]]
        lines.append(f"| {row['ratio']} | {row['value']:.2f} | {row['target']} | {met} |")
    scenarios = result["scenarios"]
    if "passthrough" in scenarios:
        lines += [
            "",
            "## 1. Passthrough (in and out in one topic format)",
            "",
            report.markdown(scenarios["passthrough"]),
        ]
    if "serving" in scenarios:
        lines += ["", *_serving(scenarios["serving"])]
    if "latency" in scenarios:
        lines += ["", *_latency(scenarios["latency"])]
    if "scaleout" in scenarios:
        lines += ["", *_scaleout(scenarios["scaleout"])]
    if "score" in scenarios:
        lines += ["", *_score(scenarios["score"])]
    if plots:
        lines += ["", "## Plots", "", *(f"![{Path(p).stem}]({Path(p).name})" for p in plots)]
    lines += ["", "Versions: " + json.dumps(result["versions"])]
    return "\n".join(lines) + "\n"


def _serving(serving: dict[str, Any]) -> list[str]:
    lines = [
        f"## 2-3, 6. Serving (N = {serving['records']:,}, one run each)",
        "",
        "| model | streamflow batched (500) | streamflow batch 1 | ratio "
        "| raw model(x), batch 500 | raw, batch 1 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("wine", "wide"):
        lines.append(
            f"| {name} | {serving[f'{name}_embedded_batched']:,.0f} "
            f"| {serving[f'{name}_embedded_per_record']:,.0f} "
            f"| {serving['ratios'][f'{name}_embedded_batched_vs_per_record']:.1f}x "
            f"| {serving[f'{name}_raw_batch_500']:,.0f} | {serving[f'{name}_raw_batch_1']:,.0f} |"
        )
    switch = serving["switch"]
    lines += [
        "",
        "| remote (KServe, wine) | records/s | vs naive |",
        "|---|---:|---:|",
        f"| streamflow V2 /infer, batched + concurrent | {serving['remote_batched_v2']:,.0f} "
        f"| {serving['ratios']['remote_batched_v2_vs_naive']:.1f}x |",
        f"| streamflow V1 :predict, batched + concurrent | {serving['remote_batched_v1']:,.0f} "
        f"| {serving['ratios']['remote_batched_v1_vs_naive']:.1f}x |",
        f"| one synchronous request per record | {serving['remote_naive_sync']:,.0f} | 1 |",
        "",
        f"Model switch under load: {switch['push_to_first_new_output_s']:.2f} s from push to the "
        f"first output of the new version; records lost: {int(switch['lost'])}.",
    ]
    if "digits" in serving:
        lines += ["", *_digits(serving["digits"])]
    return lines


def _digits(digits: dict[str, Any]) -> list[str]:
    counts, load = digits["records"], digits["load_1m"]
    rates, cpu, ratios = digits["rates"], digits["cpu_us_per_record"], digits["ratios"]
    lines = [
        f"### Digits CNN through the tensor mapping ({digits['rounds']} interleaved rounds; "
        f"{counts['batched']:,} records batched, {counts['per_record']:,} per record, "
        f"{counts['remote']:,} remote; 1-minute load {load['min']:.1f}-{load['max']:.1f})",
        "",
        f"Model: {digits['model']}. Input: the pixels as a raw float32 tensor (`bytes`), "
        "unless said.",
        "",
        "| configuration | records/s, median (min-max) | replica CPU us / record |",
        "|---|---:|---:|",
    ]
    for key, name in DIGITS_ROWS:
        rate = rates[key]
        lines.append(
            f"| {name} | {rate['median']:,.0f} ({rate['min']:,.0f}-{rate['max']:,.0f}) "
            f"| {cpu[key]['median']:,.0f} |"
        )
    raw, payload = digits["raw"], digits["payload_bytes"]
    lines += [
        "",
        "| ratio (paired by round, median) | value |",
        "|---|---:|",
        f"| batched / per record, Keras | {ratios['keras_batched_vs_per_record']:.1f}x |",
        f"| batched / per record, ONNX | {ratios['onnx_batched_vs_per_record']:.1f}x |",
        f"| ONNX / Keras, batched | {ratios['onnx_vs_keras_batched']:.2f}x |",
        f"| ONNX / Keras, per record | {ratios['onnx_vs_keras_per_record']:.2f}x |",
        f"| raw-bytes / nested-array input, Keras batched | "
        f"{ratios['bytes_vs_nested_input']:.2f}x |",
        f"| V2 binary / V2 JSON | {ratios['v2_binary_vs_json']:.2f}x |",
        "",
        f"The models alone (records/s): Keras `model(x)` {raw['keras_batch_64']:,.0f} in "
        f"batches of {digits['remote_batch_size']} and {raw['keras_batch_1']:,.0f} one by one; "
        f"onnxruntime `session.run` {raw['onnx_batch_64']:,.0f} and {raw['onnx_batch_1']:,.0f} "
        f"({ratios['raw_onnx_vs_keras_batch_64']:.1f}x and "
        f"{ratios['raw_onnx_vs_keras_batch_1']:.1f}x Keras).",
        "",
        f"One V2 request of {digits['remote_batch_size']} images: "
        f"{payload['v2_json']['request']:,} B as JSON, {payload['v2_binary']['request']:,} B "
        f"binary ({ratios['v2_json_vs_binary_request_bytes']:.2f}x smaller); its answer "
        f"{payload['v2_json']['response']:,} B and {payload['v2_binary']['response']:,} B.",
    ]
    return lines


def _latency(latency: dict[str, Any]) -> list[str]:
    def cell(row: dict[str, Any], key: str) -> str:
        stats = row.get(key)
        return f"{stats['median']:.1f} ({stats['min']:.1f}-{stats['max']:.1f})" if stats else "-"

    def split(row: dict[str, Any], part: str) -> str:
        p50, p99 = row.get(f"{part}_p50_ms"), row.get(f"{part}_p99_ms")
        return f"{p50['median']:.1f} / {p99['median']:.1f}" if p50 and p99 else "-"

    settings = latency["settings"]
    lines = [
        f"## 4. End-to-end latency ({settings['rounds']} rounds, {settings['step_s']:g} s a step; "
        "ms, median (min-max))",
        "",
        "Each processor is loaded at fractions of its own maximum rate; *out* is what "
        "reached the probe per second while the load ran (below *in*: it fell behind). "
        "*hand* is the hand-written loop of section 1, which waits up to 100 ms for a full "
        "batch. *to broker* is a record's time until the broker appended its output "
        "(ingress, the processor's consume, work and produce), *after* the rest (its commit "
        "and the probe's fetch once a `read_committed` reader may see it), p50/p99 each.",
        "",
        "| processor | guarantee | max rate | load | in (rec/s) | out (rec/s) | p50 | p95 | p99 "
        "| to broker | after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in latency["summary"]:
        out = row.get("output_rate")
        lines.append(
            f"| {row.get('competitor', 'streamflow')} | {row['guarantee']} "
            f"| {row['max_rate']:,.0f} | {row['fraction']:.0%} | {row['rate']:,.0f} "
            f"| {'-' if out is None else f'{out:,.0f}'} | {cell(row, 'p50_ms')} "
            f"| {cell(row, 'p95_ms')} | {cell(row, 'p99_ms')} "
            f"| {split(row, 'before')} | {split(row, 'after')} |"
        )
    if transaction := latency.get("transaction"):
        lines += [
            "",
            "One exactly-once transaction on this broker (`python -m bench.transactions`), "
            "by the wait between a commit and the next transaction's first record.",
            "",
            *transactions.lines(transaction),
        ]
    return lines


def _scaleout(scaleout: dict[str, Any]) -> list[str]:
    lines = [
        "## 5. Scale-out (records/s, median over rounds; CPU s per M records)",
        "",
        "| workload | replicas | records/s | CPU s / M |",
        "|---|---:|---:|---:|",
    ]
    runs = scaleout["runs"]
    for workload in dict.fromkeys(r["workload"] for r in runs):
        for replicas in sorted({r["replicas"] for r in runs}):
            mine = [r for r in runs if r["workload"] == workload and r["replicas"] == replicas]
            rate = statistics.median(r["records_per_s"] for r in mine)
            cpu = statistics.median(r["cpu_s_per_M"] for r in mine)
            lines.append(f"| {workload} | {replicas} | {rate:,.0f} | {cpu:.1f} |")
    return lines


def _score(score: dict[str, Any]) -> list[str]:
    summary = score["summary"]
    return [
        f"## 7. Batch through streaming ({score['rows']:,} rows of Parquet, "
        f"{score['rounds']} rounds; from start to exit)",
        "",
        "| scorer | rows/s (median) |",
        "|---|---:|",
        f"| `streamflow score` | {summary['score_rows_per_s']:,.0f} |",
        f"| hand-written loop | {summary['hand_rows_per_s']:,.0f} |",
        "",
        f"Ratio, paired by round: {summary['ratio']:.2f}.",
    ]


def main(argv: list[str]) -> int:
    """Rewrite ``<stem>.md`` from ``<stem>.json``, with the plots that lie beside it."""
    source = Path(argv[0])
    plots = sorted(str(p) for p in source.parent.glob(f"{source.stem}-*.png"))
    text = markdown(json.loads(source.read_text()), plots=plots)
    source.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
