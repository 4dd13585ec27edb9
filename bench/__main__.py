"""``python -m bench``: every benchmark scenario in one run, on one broker, with a report.

``python -m bench [SCENARIO ...] [--full] [--rounds N] [--bootstrap HOST:PORT]``

Scenarios (default: all, in this order):

* ``passthrough``: streamflow against the hand-written loop, Quix Streams and faust;
* ``latency``: end-to-end p50/p95/p99 at 10/50/90% of the maximum rate, both guarantees;
* ``scaleout``: passthrough and embedded inference with 1 and 2 replicas;
* ``serving``: micro-batched embedded inference (wine and a wide MLP), remote inference
  against KServe, the model switch under load, and the digits CNN through its tensor
  mapping (batched / per record, Keras / ONNX, V2 JSON / binary) (``inference``,
  ``remote`` and ``switch`` are names for it too).

It starts its own devkit broker unless ``--bootstrap`` or ``STREAMFLOW_KAFKA_BOOTSTRAP``
names one, installs the peers into bench/.venv (bench/setup-peers) when passthrough
runs, and writes ``bench/results/<date>.json``, ``<date>.md`` and ``<date>-*.png``. The
default sizes keep a full run near 15 minutes on a 2-core machine; ``--full`` runs the
issue's sizes (1,000,000 passthrough records, more inference records), which takes longer.

Each step is numbered and timed on stderr (``bench 3/7: latency (...)``): a live line on
a terminal, with the scenario's own lines scrolling above it, and plain lines in a log or
CI (the CLI's :mod:`streamflow.cli.progress`). stdout carries only the Markdown report.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import common, latency, passthrough, report, scaleout, summary
from streamflow.cli import progress

SCENARIOS = ("passthrough", "latency", "scaleout", "serving", "score")
ALIASES = {"inference": "serving", "remote": "serving", "switch": "serving"}
STEPS = {  # every step a run may take, in order, and what it says while it runs
    "peers": "the peers' virtualenv (bench/setup-peers)",
    "broker": "starting a devkit broker",
    "passthrough": "passthrough (streamflow vs the hand-written loop, Quix Streams, faust)",
    "latency": "latency (p50/p95/p99 at 10/50/90% of the maximum rate)",
    "models": "training the wine models and the wide MLP",
    "scaleout": "scale-out (1 and 2 replicas)",
    "serving": "serving (embedded vs remote, the model switch, digits)",
    "score": "batch through streaming (streamflow score vs a hand-written loop)",
    "report": "the report (JSON, Markdown, plots)",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Every benchmark scenario in one run, on one broker, with a report.",
    )
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--full", action="store_true", help="the issue's sizes: 1M records")
    parser.add_argument(
        "--rounds", type=int, help="rounds of passthrough, latency and scale-out (3)"
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"),
        help="an existing broker (default: $STREAMFLOW_KAFKA_BOOTSTRAP, else a devkit broker)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    args = parser.parse_args(argv)
    chosen = [ALIASES.get(name, name) for name in args.scenarios] or list(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    args.scenarios = [name for name in SCENARIOS if name in chosen]
    return args


def sizes(args: argparse.Namespace) -> dict[str, int]:
    """Records per run of each scenario; ``--full`` is the issue's 1M passthrough records."""
    full = args.full
    return {
        "passthrough": 1_000_000 if full else 200_000,
        "passthrough_rounds": args.rounds or 3,
        "rounds": args.rounds or 3,
        "serving": 300_000 if full else 100_000,
        "scaleout": 1_000_000 if full else 200_000,
        "scaleout_inference": 200_000 if full else 60_000,
        "score": 1_000_000 if full else 100_000,
    }


class Steps:
    """Numbers the steps of this run (``bench 3/7: ...``) and shows each while it runs."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    @contextlib.contextmanager
    def step(self, key: str) -> Iterator[None]:
        what = f"bench {self.keys.index(key) + 1}/{len(self.keys)}: {STEPS[key]}"
        with progress.waiting(what) as wait:
            yield
            wait.done(f"{what}: done")


def planned_steps(args: argparse.Namespace) -> list[str]:
    """The steps this run takes, in the order of :data:`STEPS`."""
    wanted = set(args.scenarios) | {"report"}
    if "passthrough" in args.scenarios or not args.no_plots:
        wanted.add("peers")
    if not args.bootstrap:
        wanted.add("broker")
    if {"scaleout", "serving"} & set(args.scenarios):
        wanted.add("models")
    return [key for key in STEPS if key in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = sizes(args)
    steps = Steps(planned_steps(args))
    if "peers" in steps.keys:
        with steps.step("peers"):
            subprocess.run([str(common.REPO / "bench" / "setup-peers")], check=True)
    started = time.monotonic()
    scenarios: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        with steps.step("broker") if "broker" in steps.keys else contextlib.nullcontext():
            bootstrap, broker = stack.enter_context(common.broker(args.bootstrap))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        _say(f"broker: {bootstrap} ({broker}); scenarios: {', '.join(args.scenarios)}")
        failures: dict[str, str] = {}

        def attempt(key: str, run: Callable[[], Any]) -> None:
            """One scenario; a failure is reported and recorded, and the others still run
            (a crash in the last scenario must not throw away an hour of the first)."""
            with steps.step(key):
                try:
                    scenarios[key] = run()
                except Exception as exc:
                    failures[key] = f"{type(exc).__name__}: {exc}"
                    _say(
                        f"bench: {key} failed, the other scenarios go on:\n{traceback.format_exc()}"
                    )

        if "passthrough" in args.scenarios:
            options = passthrough.parse_args(
                ["--records", str(n["passthrough"]), "--rounds", str(n["passthrough_rounds"])]
            )
            attempt(
                "passthrough",
                lambda: passthrough.run_scenario(options, bootstrap=bootstrap, broker=broker),
            )
        if "latency" in args.scenarios:
            settings = latency.Settings(rounds=n["rounds"])
            attempt("latency", lambda: latency.run_scenario(bootstrap, workdir, settings))
        models = None
        if "models" in steps.keys:

            def train() -> Any:
                from bench import serving  # TensorFlow: only when a scenario needs it

                return serving.Models(workdir / "models")

            attempt("models", train)  # a failure here is recorded too, not a lost run
            models = scenarios.pop("models", None)
        if "scaleout" in args.scenarios:
            attempt(
                "scaleout",
                lambda: scaleout.run_scenario(
                    bootstrap,
                    workdir,
                    rounds=n["rounds"],
                    records=n["scaleout"],
                    inference_records=n["scaleout_inference"],
                    models=models,
                ),
            )
        if "serving" in args.scenarios:

            def serve() -> Any:
                from bench import serving

                if models is None:
                    raise RuntimeError("the models were not trained (see the models step)")
                with serving.model_server(models) as url:
                    return serving.run_scenario(bootstrap, workdir, models, url, n["serving"])

            attempt("serving", serve)
        if "score" in args.scenarios:
            from bench import scoring

            attempt(
                "score",
                lambda: scoring.run_scenario(
                    bootstrap, workdir, rows=n["score"], rounds=n["rounds"]
                ),
            )
    result: dict[str, Any] = {
        "benchmark": "streamflow",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "settings": {
            "command": shlex.join(
                ["python", "-m", "bench", *(argv if argv is not None else sys.argv[1:])]
            ),
            "scenarios": args.scenarios,
            "sizes": n,
            "broker": broker,
            "duration_s": round(time.monotonic() - started),
        },
        "environment": common.environment(),
        "versions": common.competitor_versions(),
        "scenarios": scenarios,
        "failures": failures,
    }
    result["headline"] = summary.headline(result)
    with steps.step("report"):
        path, text = _write(result, args.no_plots)
    print(text)  # after the live line is gone: stdout and a terminal's stderr share a screen
    took = result["settings"]["duration_s"]
    also = ".md" if args.no_plots else ".md, .png"
    _say(f"results: {path.relative_to(common.REPO)} (and {also}) in {took} s")
    if failures:
        _say("bench: failed: " + "; ".join(f"{k}: {v}" for k, v in failures.items()))
        return 1
    return 0


def _write(result: dict[str, Any], no_plots: bool) -> tuple[Path, str]:
    """``results/<date>.json``, ``.md`` and the PNGs, never overwriting an earlier run."""
    report.RESULTS_DIR.mkdir(exist_ok=True)
    stem = dt.date.today().isoformat()
    path, count = report.RESULTS_DIR / f"{stem}.json", 1
    while path.exists():
        count += 1
        path = report.RESULTS_DIR / f"{stem}-{count}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    plots: list[str] = []
    if not no_plots:
        drawn = subprocess.run(
            [str(common.PEERS_PYTHON), "-m", "bench.plots", str(path)],
            cwd=common.REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if drawn.returncode != 0:
            _say(f"warning: the plots failed:\n{drawn.stderr[-2000:]}")
        plots = drawn.stdout.split()
    text = summary.markdown(result, plots=plots)
    path.with_suffix(".md").write_text(text)
    return path, text


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
