"""The streamflow competitor: one replica run through ``run_replica``, in its own process.

``streamflow/cli/main.py`` (the ``streamflow streamlet run`` entry point) does not
exist yet, so this wrapper does what that command does: read the application spec
(JSON), configure logging, install the SIGTERM handler and call ``run_replica``.
Switch to the CLI once it exists; the driver only needs the reports below.

To report when the first batch arrives and when the ``--records``-th input has been
handed to the producer, the wrapper times ``Processor.process_batch`` by wrapping it
on the class. That adds one Python call and a comparison per *batch*, not per record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from confluent_kafka import Message

from bench import common
from streamflow.blueprint.model import Application
from streamflow.runtime import logs, processor
from streamflow.runtime.replica import ReplicaOptions, install_signal_handlers, run_replica


def _time_batches(records: int) -> None:
    """Wrap the batch step so the driver learns when consumption starts and ends."""
    original = processor.Processor.process_batch
    seen = 0

    def timed(self: processor.Processor, messages: list[Message]) -> None:
        nonlocal seen
        if seen == 0:
            common.report("first")
        original(self, messages)
        before, seen = seen, seen + len(messages)
        if before < records <= seen:
            common.report("produced", records=seen)

    processor.Processor.process_batch = timed  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-spec", type=Path, required=True)
    parser.add_argument("--streamlet", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args(argv)

    app = Application.from_dict(json.loads(args.app_spec.read_text()))
    logs.configure_logging(
        fmt="text", level="warning", app=app.name, streamlet=args.streamlet, replica=0
    )
    _time_batches(args.records)
    options = ReplicaOptions(bootstrap=args.bootstrap, batch_size=args.batch_size)
    install_signal_handlers(options.stop)
    run_replica(app, args.streamlet, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
