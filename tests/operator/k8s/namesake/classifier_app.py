"""A module named like the wine example's ``classifier_app``, with a namesake class in it.

The operator tests deploy it beside the wine classifier: each application must
be verified against its own ``classifier_app``, never the other's.
"""

from __future__ import annotations

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet, params


class WineClassifier(Streamlet):
    """Labels each wine sample good or poor by its alcohol, above or below a threshold."""

    inlet = Inlet("in", schema="examples.wine.WineSample")
    out = Outlet(schema="examples.wine.WineScore")

    threshold = params.Float(default=11.0, description="alcohol from which a wine is good")

    def process_batch(self, records: list[Record]) -> list[dict[str, Any]]:
        return [self._label(record.value) for record in records]

    def _label(self, sample: dict[str, Any]) -> dict[str, Any]:
        score = float(sample["alcohol"])
        return {
            "id": sample["id"],
            "score": score,
            "label": "good" if score >= self.threshold else "poor",
            "band": "HIGH" if score >= self.threshold else "LOW",
            "model": None,
        }
