"""Where the passthrough's main loop spends its time: py-spy, attached mid-run.

``python -m bench.profile [--size 100] [--competitor sf-batch] [--records 500000]``

Runs one passthrough (Avro, at-least-once) with ``python -m bench.passthrough``,
waits until its child (``bench.sf_replica`` or ``bench.handwritten``) has been
running a few seconds, records it with ``py-spy record --native -r 200 -f raw``
for ``--duration`` seconds, and writes ``bench/results/profiles/<competitor>-<size>.txt``:
the top frames by self time and inclusive time, as shares of the main loop
thread's samples. py-spy is not a dependency: ``pip install py-spy`` first.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

_CHILD = {"sf-batch": "bench.sf_replica", "hand": "bench.handwritten"}
_LOOP = {"sf-batch": "Processor.run", "hand": "Passthrough.run"}


def _child_pid(module: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", module], capture_output=True, text=True).stdout
        pids = [int(p) for p in found.split()]
        if pids:
            return pids[0]
        time.sleep(0.2)
    raise SystemExit(f"no {module} process appeared in {timeout:.0f}s")


def _where(frame: str) -> str:
    """``function (file:line)`` as ``function (file)``: lines apart, a function is one entry."""
    name, paren, rest = frame.partition(" (")
    return f"{name} ({rest.split(':')[0].rstrip(')')})" if paren else frame


def summarise(raw: Path, loop: str, title: str) -> str:
    """Top 20 by self and by inclusive time, as shares of the samples inside ``loop``."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = looped = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [f.strip() for f in stack.split(";")[1:]]
        if not any(loop in f for f in frames):
            continue
        looped += count
        names = [_where(f) for f in frames]
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    lines = [f"# {title}", f"samples: {total}, main loop thread: {looped}", ""]
    # the frames every loop sample passes through (the entry point down to the loop) say
    # nothing about where the time went: inclusive shares leave them out
    below = collections.Counter({k: n for k, n in inclusive.items() if n < 0.995 * looped})
    for heading, counter in (("self time", own), ("inclusive, below the loop", below)):
        lines.append(f"top 30 by {heading} (share of the main loop):")
        lines += [
            f"{100 * n / max(looped, 1):5.1f}%  {name}" for name, n in counter.most_common(30)
        ]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--competitor", choices=sorted(_CHILD), default="sf-batch")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--duration", type=int, default=5, help="seconds recorded")
    parser.add_argument("--bootstrap", default=os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP"))
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [
        sys.executable, "-m", "bench.passthrough", "--formats", "avro", "--guarantees",
        "at-least-once", "--competitors", args.competitor, "--size", str(args.size),
        "--records", str(args.records), "--rounds", "1",
    ] + (["--bootstrap", args.bootstrap] if args.bootstrap else [])  # fmt: skip
    run = subprocess.Popen(command, cwd=common.REPO)
    try:
        pid = _child_pid(_CHILD[args.competitor], timeout=300)
        time.sleep(3)  # past start-up, into the steady state
        with tempfile.TemporaryDirectory() as scratch:
            raw = Path(scratch) / "profile.raw"
            subprocess.run(
                [spy, "record", "--native", "-r", "200", "-f", "raw", "-d", str(args.duration),
                 "--pid", str(pid), "-o", str(raw)],
                check=True,
            )  # fmt: skip
            title = (
                f"{args.competitor}, {args.size} B, at-least-once; py-spy record --native -r 200 "
                f"-f raw -d {args.duration}, attached mid-run; shares of the main loop's samples"
            )
            text = summarise(raw, _LOOP[args.competitor], title)
    finally:
        run.wait(timeout=900)
    out = common.REPO / "bench" / "results" / "profiles" / f"{args.competitor}-{args.size}.txt"
    out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
