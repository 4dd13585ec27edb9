"""The console egress: records as JSON on standard output.

The quickest way to see what flows through a topic while developing, and a
sink that ``jq`` can read: one JSON object per line by default, or indented
JSON for people. Each record is flushed as it is written, so a pipe sees it
at once.
"""

from __future__ import annotations

import sys
from typing import TextIO

from streamflow.api import params
from streamflow.api.ports import Inlet
from streamflow.api.streamlet import Context, Record, Streamlet
from streamflow.streamlets.io import _binding, documents

__all__ = ["ConsoleEgress"]


class ConsoleEgress(_binding.SchemaBound, Streamlet):
    """Prints each record to standard output as JSON.

    Generic: bind the schema with ``in_ = Inlet("in", "my.Schema")`` in a subclass,
    or ``ConsoleEgress.for_schema("my.Schema")``.
    """

    generic_port = "in_"
    in_ = Inlet("in", description="the records to print")

    format = params.Choice(
        ("json", "pretty"),
        default="json",
        description="json: one line per record; pretty: indented, for reading",
    )
    include_key = params.Bool(
        default=False, description='print {"key": ..., "value": ...} instead of the value alone'
    )

    def setup(self, context: Context) -> None:
        self.context = context
        self.bound_schema_name()

    @property
    def stream(self) -> TextIO:
        """Where records go; looked up at each write, so redirecting stdout works."""
        return sys.stdout

    def process(self, record: Record) -> None:
        doc = documents.egress_document(record, include_key=self.include_key)
        print(documents.dumps(doc, pretty=self.format == "pretty"), file=self.stream, flush=True)
