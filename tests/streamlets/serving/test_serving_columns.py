"""The serving streamlet on columns: the same outputs as on records, with no dict per record.

``ModelServing`` serves a batch through ``process_columns`` (the features straight from
their columns into the model, the outputs back as columns); a subclass with its own
``postprocess`` is served through ``process_batch``. Both must write the same records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamflow.api.descriptor import describe
from streamflow.api.streamlet import Logic
from streamflow.streamlets.serving.streamlet import ModelServing
from streamflow.testkit import StreamletHarness
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s


class RecordWine(s.classifier_app.WineClassifier):  # type: ignore[name-defined,misc]
    """The wine classifier served record by record: its own (unchanged) postprocess."""

    def postprocess(self, records: Any, outputs: Any) -> list[dict]:  # type: ignore[type-arg]
        return super().postprocess(records, outputs)  # type: ignore[no-any-return]


def _rows(models: WineModels, n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"w{i}",
            **{f: float(models.x[i][j]) for j, f in enumerate(s.FEATURES)},
            "label": int(models.y[i]) if i % 3 else None,
        }
        for i in range(n)
    ]


def _served(h: StreamletHarness, models: WineModels, rows: list[dict[str, Any]]) -> list[Any]:
    h.control("model", s.descriptor(1, "KERAS", data=models.v1.keras_file.read_bytes()))
    s.settle(h, 1)
    h.feed("in", rows, keys=[f"k{i}" for i in range(len(rows))])
    return [o for o in h.run() if o.outlet == "out"]


def test_the_classifier_serves_columns_and_a_record_hook_serves_records() -> None:
    assert describe(s.classifier_app.WineClassifier).logic is Logic.PROCESS_COLUMNS
    assert describe(s.classifier_app.WineClassifier).columns_outlet == "out"
    assert describe(RecordWine).logic is Logic.PROCESS_BATCH
    assert ModelServing.process_columns is not None  # the base keeps it for the others


def test_columns_and_records_write_the_same_outputs(
    wine_models: WineModels, tmp_path: Path
) -> None:
    rows = _rows(wine_models, 40)
    on_columns = _served(s.harness(tmp_path / "c"), wine_models, rows)
    record_harness = StreamletHarness(
        RecordWine,
        config={**s.CONFIG, "cache_dir": str(tmp_path / "r" / "cache")},
        schema_paths=[s.SCHEMAS],
    )
    on_records = _served(record_harness, wine_models, rows)
    assert len(on_columns) == len(rows)

    def comparable(outputs: list[Any]) -> list[Any]:
        return [
            (o.key, {k: v for k, v in o.value.items() if k != "latency_ms"}, o.headers)
            for o in outputs
        ]

    assert comparable(on_columns) == comparable(on_records)
    assert on_columns[1].value["label"] == rows[1]["label"] and on_columns[0].value["label"] is None


def test_data_before_any_model_is_a_dead_letter_each_with_on_no_model_dlq(
    tmp_path: Path,
) -> None:
    h = s.harness(tmp_path, on_no_model="dlq")
    h.feed("in", [{"id": "a", **dict.fromkeys(s.FEATURES, 0.5), "label": None}] * 3)
    assert [o for o in h.run() if o.outlet == "out"] == []
    assert [d.kind for d in h.dead_letters] == ["logic"] * 3
    assert all("no model is loaded yet" in d.error for d in h.dead_letters)
