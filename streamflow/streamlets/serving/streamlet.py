"""The model-serving streamlet: a dynamically controlled stream.

Data records flow through ``in`` → ``out``; ``ModelDescriptor`` records on
the ``model`` control inlet switch the model live. The state is the current
model: embedded (Keras or SavedModel) or remote (a V1 or V2 model server).
How a descriptor is checked, loaded off the hot path and swapped in between
batches lives in :mod:`.follower`, shared with the explanation streamlet;
this module is the data half: one vectorised inference per batch, and every
output names the version that produced it.

Bind the data ports by subclassing::

    class WineServing(ModelServing):
        inp = Inlet("in", "examples.wine.WineFeatures")
        out = Outlet("out", "examples.wine.WinePrediction")
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from streamflow.api import params
from streamflow.api.ports import Emit, Inlet, Outlet
from streamflow.api.streamlet import Context, Record
from streamflow.schema import SchemaStore
from streamflow.streamlets.serving import remote
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower

__all__ = ["ModelServing", "NoModelError"]

log = logging.getLogger("streamflow.streamlets.serving")


class NoModelError(Exception):
    """A data record arrived before any model was loaded (with ``on_no_model: dlq``)."""


class ModelServing(ModelFollower):
    """Serves a model switched live by ModelDescriptor records on the `model` control inlet."""

    inp = Inlet("in", description="records with the model's input features")
    out = Outlet("out", description="the input's fields plus the prediction and model version")

    output_field = params.Str(default="probabilities", description="field for the output row")
    class_field = params.Str(default="", description="field for the argmax class (optional)")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._output_fields: set[str] = set()

    def setup(self, context: Context) -> None:
        super().setup(context)
        store = context.extras.get("schema_store")
        store = store if isinstance(store, SchemaStore) else SchemaStore()
        self._output_fields = set(store.get(type(self).out.schema).field_names())

    async def process_batch(self, records: list[Record]) -> list[Emit]:
        await self.close_retired()
        active = self.current
        if active is None:
            raise NoModelError("no model is loaded yet (on_no_model: dlq)")
        batch = np.array(
            [[float(r.value[f]) for f in self.input_fields] for r in records], dtype=np.float32
        )
        started = time.perf_counter()
        if isinstance(active.predictor, remote.InferenceClient):
            predictions = await active.predictor.predict(batch)
        else:
            predictions = active.predictor.predict(batch)
        latency_ms = (time.perf_counter() - started) * 1000.0
        headers = {"streamflow-model": active.tag}
        return [
            self.out(self._output(r.value, row, active, latency_ms), headers=headers)
            for r, row in zip(records, predictions, strict=True)
        ]

    def _output(
        self, value: dict[str, Any], row: np.ndarray, active: ActiveModel, latency_ms: float
    ) -> dict[str, Any]:
        fields = self._output_fields
        out = {k: v for k, v in value.items() if k in fields}
        out[self.output_field] = [float(x) for x in np.ravel(row)]
        if self.class_field:
            out[self.class_field] = int(np.argmax(row))
        for field, fill in (
            ("model", active.name),
            ("model_version", active.version),
            ("latency_ms", latency_ms),
        ):
            if field in fields:
                out[field] = fill
        return out
