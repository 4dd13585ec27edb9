"""Files in and out: a JSONL/CSV feed into Kafka, and a JSONL sink out of it.

``FileIngress`` reads a file once, or follows it like ``tail -f`` (appended
lines, truncation and rotation), and skips a bad line with a warning that
names its line number rather than stopping the pipeline on it.

``FileEgress`` appends one JSON object per record. It writes a whole batch,
flushes it (and optionally fsyncs it) before returning, and the runtime
commits the batch's offsets only after that: what Kafka counts as consumed is
in the file. A crash between the write and the commit repeats the batch, so
the file is at-least-once, like the rest of the pipeline.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from streamflow.api import params
from streamflow.api.ports import Emit, Inlet, Outlet
from streamflow.api.streamlet import Context, Record, Streamlet
from streamflow.schema.store import Schema
from streamflow.streamlets.io import _binding, documents, reading

__all__ = ["FileEgress", "FileIngress"]


class FileIngress(_binding.SchemaBound, Streamlet):
    """Reads JSONL or CSV records from a file, once or following appends (``tail -f``).

    Generic: bind the schema with ``out = Outlet("out", "my.Schema")`` in a subclass,
    or ``FileIngress.for_schema("my.Schema")``.
    """

    out = Outlet("out", description="the records read from the file")

    path = params.Str(min_length=1, description="the file to read")
    format = params.Choice(
        reading.FORMATS, default="auto", description="the file's format; auto: by extension"
    )
    follow = params.Bool(
        default=False, description="keep reading lines appended to the file, like tail -f"
    )
    poll_interval = params.Duration(
        default="500ms", min="10ms", description="how often to look for appended lines"
    )
    key_field = params.Str(default="", description="key each record by this field; empty: unkeyed")

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config)
        self.sleep = sleep
        self.reader: reading.RowReader | None = None

    def setup(self, context: Context) -> None:
        self.context = context
        self.schema: Schema = self.bound_schema(context)
        self.file_format = reading.file_format(self.path, self.format)
        self.converter = documents.RecordConverter(
            self.schema, outlet=self.out.name, key_field=self.key_field
        )
        if not self.follow and not Path(self.path).is_file():
            raise ValueError(f"{self.path!r} is not a file (set follow to wait for it)")

    def source(self) -> Iterator[Emit]:
        self.reader = reading.RowReader(
            self.converter, logger=self.context.logger, source=self.path
        )
        files = reading.generations(
            self.path,
            follow=self.follow,
            poll=self.poll_interval.total_seconds(),
            sleep=self.sleep,
        )
        for lines in files:
            rows = reading.rows(lines, fmt=self.file_format, schema=self.schema)
            for value in self.reader.records(rows):
                yield self.converter.output(value)
        self.context.logger.info(
            "%s: %d records read, %d lines skipped",
            self.path,
            self.reader.records_read,
            self.reader.rows_skipped,
        )


class FileEgress(_binding.SchemaBound, Streamlet):
    """Appends each record to a JSONL file, one JSON object per line.

    Generic: bind the schema with ``in_ = Inlet("in", "my.Schema")`` in a subclass,
    or ``FileEgress.for_schema("my.Schema")``.
    """

    generic_port = "in_"
    in_ = Inlet("in", description="the records to write")

    path = params.Str(
        min_length=1,
        description="the file to append to; {app}, {streamlet} and {replica} are replaced, "
        "so that replicas write files of their own",
    )
    include_key = params.Bool(
        default=False, description='write {"key": ..., "value": ...} instead of the value alone'
    )
    fsync = params.Bool(
        default=False, description="fsync after each batch, so it survives a power loss too"
    )

    def setup(self, context: Context) -> None:
        self.context = context
        self.bound_schema_name()
        self.file_path = _expand(self.path, context)
        self.file_path.parent.mkdir(parents=True, exist_ok=True)
        # Open for the streamlet's lifetime; teardown() closes it.
        self._file: IO[str] | None = open(self.file_path, "a", encoding="utf-8")  # noqa: SIM115

    def process_batch(self, records: Sequence[Record]) -> list[None]:
        if self._file is None:
            raise RuntimeError(f"{self.file_path} is closed")
        text = "".join(
            documents.dumps(documents.egress_document(r, include_key=self.include_key)) + "\n"
            for r in records
        )
        self._file.write(text)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        return [None] * len(records)

    def teardown(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _expand(path: str, context: Context) -> Path:
    fields = {"app": context.app, "streamlet": context.streamlet, "replica": context.replica}
    try:
        return Path(path.format_map(fields))
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"path {path!r}: only {{app}}, {{streamlet}} and {{replica}} may appear in braces "
            f"({type(exc).__name__}: {exc})"
        ) from None
