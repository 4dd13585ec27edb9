"""The streamflow competitor: ``streamflow streamlet run`` (what a pod runs), timed.

The child runs the real command line, ``streamflow.cli.main`` with ``streamlet run
--app-spec ... --streamlet ...``, in this process: logging set-up, signal handlers,
health server, ``run_replica``. Before that it wraps ``Processor.process_batch`` on the
class, so it can report when the first batch arrives and when the ``--records``-th input
has been handed to the producer. That costs one Python call and a comparison per
*batch*, not per record. Under exactly-once it also counts the transactions committed
by then: under load, full batches share one.
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import Message

from bench import common
from streamflow.cli import main as cli
from streamflow.runtime import delivery, processor
from streamflow.runtime.transactions import ExactlyOnce


def _time_batches(records: int) -> None:
    """Wrap the batch step so the driver learns when consumption starts and ends, and
    the commit of a transaction so it learns how many batches one held."""
    original = processor.Processor.process_batch
    commit = ExactlyOnce.end_batch
    seen = batches = transactions = 0

    def timed(self: processor.Processor, messages: list[Message]) -> None:
        nonlocal seen, batches
        if seen == 0:
            common.report("first")
        original(self, messages)
        before, seen, batches = seen, seen + len(messages), batches + 1
        if before < records <= seen:
            common.report("produced", records=seen, batches=batches, transactions=transactions)

    def counted(self: ExactlyOnce, offsets: delivery.Offsets) -> None:
        nonlocal transactions
        commit(self, offsets)
        transactions += 1

    processor.Processor.process_batch = timed  # type: ignore[method-assign]
    ExactlyOnce.end_batch = counted  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-spec", required=True)
    parser.add_argument("--streamlet", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--replica", type=int, default=0)
    args = parser.parse_args(argv)
    _time_batches(args.records)
    sys.argv = [
        "streamflow",
        *("streamlet", "run", "--app-spec", args.app_spec, "--streamlet", args.streamlet),
        *("--replica", str(args.replica)),
        *("--bootstrap-servers", args.bootstrap, "--batch-size", str(args.batch_size)),
        *("--health-port", "0", "--log-level", "warning"),
    ]
    cli.main()  # exits with the command's status


if __name__ == "__main__":
    main()
