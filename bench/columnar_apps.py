"""The streamlets ``bench.columnar`` compares, each on the wine features topic.

- ``RecordWineClassifier``: the wine classifier served record by record, as every
  ``ModelServing`` was before columns (a ``postprocess`` of its own sends the batch
  through ``process_batch``);
- ``WinePassthrough``: each features record copied to the output, per record: what the
  runtime costs without a model;
- ``ColumnPassthrough``: the same on columns (``process_columns``).
"""

from __future__ import annotations

from typing import Any

from classifier_app import FEATURES_SCHEMA, WineClassifier

from streamflow import Inlet, Outlet, Record, Streamlet
from streamflow.api.columns import ColumnBatch


class RecordWineClassifier(WineClassifier):
    def postprocess(self, records: list[Record], outputs: Any) -> list[dict[str, Any]]:
        return super().postprocess(records, outputs)


class WinePassthrough(Streamlet):
    inp = Inlet("in", FEATURES_SCHEMA)
    out = Outlet("out", FEATURES_SCHEMA)

    def process(self, record: Record) -> dict[str, Any]:
        return record.value


class ColumnPassthrough(Streamlet):
    inp = Inlet("in", FEATURES_SCHEMA)
    out = Outlet("out", FEATURES_SCHEMA)

    def process_columns(self, batch: ColumnBatch) -> ColumnBatch:
        return batch
