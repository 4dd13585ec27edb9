"""The generator: a paced stream of records from a dataset, or synthesised from the schema.

It is the first streamlet of most demos and load tests, so it needs no data to
start (it synthesises records of the outlet's schema, reproducibly from a
seed) and takes real data when there is some (a JSONL or CSV dataset, typed and
validated by the schema). ``rate``, ``count`` and ``loop`` shape the stream;
pacing is drift-free and batches its sleeps (see ``_pacing``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from streamflow.api import params
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Context, Streamlet
from streamflow.schema import validate
from streamflow.schema.store import Schema
from streamflow.streamlets.io import _binding, _pacing, documents, reading, synth

__all__ = ["Generator"]


class Generator(_binding.SchemaBound, Streamlet):
    """Emits records from a JSONL/CSV dataset, or synthesised from the outlet's schema.

    Generic: bind the schema with ``out = Outlet("out", "my.Schema")`` in a subclass,
    or ``Generator.for_schema("my.Schema")``.
    """

    out = Outlet("out", description="the generated records")

    dataset = params.Str(
        default="",
        description="a JSONL or CSV file to emit (relative to the working directory); "
        "empty: synthesise records from the schema",
    )
    format = params.Choice(
        reading.FORMATS, default="auto", description="the dataset's format; auto: by extension"
    )
    rate = params.Float(
        default=0.0, min=0.0, description="records per second; 0: as fast as possible"
    )
    count = params.Int(default=0, min=0, description="stop after this many records; 0: no limit")
    loop = params.Bool(default=False, description="start the dataset again at its end")
    key_field = params.Str(default="", description="key each record by this field; empty: unkeyed")
    seed = params.Int(default=0, description="seed of the synthesised records")

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config)
        self.clock = clock
        self.sleep = sleep
        self.dataset_reader: reading.RowReader | None = None

    def setup(self, context: Context) -> None:
        self.context = context
        self.schema: Schema = self.bound_schema(context)
        self.converter = documents.RecordConverter(
            self.schema, outlet=type(self).out.name, key_field=self.key_field
        )
        if self.dataset:
            self.dataset_format = reading.file_format(self.dataset, self.format)
            if not Path(self.dataset).is_file():
                raise ValueError(f"dataset {self.dataset!r} is not a file")

    def source(self) -> Iterator[Emit]:
        pacer = _pacing.Pacer(rate=self.rate, clock=self.clock, sleep=self.sleep)
        records: Iterable[dict[str, Any]] = (
            self._dataset_records() if self.dataset else self._synthesised()
        )
        if self.count:
            records = islice(records, self.count)
        for value in records:
            pacer.wait()
            yield self.converter.output(value)

    def _dataset_records(self) -> Iterator[dict[str, Any]]:
        reader = reading.RowReader(self.converter, logger=self.context.logger, source=self.dataset)
        self.dataset_reader = reader
        while True:
            before = reader.records_read
            for lines in reading.generations(self.dataset):
                yield from reader.records(
                    reading.rows(lines, fmt=self.dataset_format, schema=self.schema)
                )
            # read, not delivered: what Kafka acknowledged is the runtime's to say (it
            # counts delivery reports, and logs them with what still waits for Kafka)
            self.context.logger.info(
                "dataset %s: %d records read, %d rows skipped",
                self.dataset,
                reader.records_read,
                reader.rows_skipped,
            )
            if not self.loop:
                return
            if reader.records_read == before:
                raise ValueError(
                    f"dataset {self.dataset!r} has no valid {self.schema.name} record to loop over"
                )

    def _synthesised(self) -> Iterator[dict[str, Any]]:
        for value in synth.Synthesiser(self.schema, seed=self.seed).records():
            problems = validate.validation_problems(self.schema, value)
            if problems:  # pragma: no cover - a bug in the synthesiser, not in user data
                raise RuntimeError(f"synthesised an invalid {self.schema.name}: {problems}")
            yield value
