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
        fields = self.input_fields
        batch = np.array([[r.value[f] for f in fields] for r in records], dtype=np.float32)
        started = time.perf_counter()
        if isinstance(active.predictor, remote.InferenceClient):
            predictions = await active.predictor.predict(batch)
        else:
            predictions = active.predictor.predict(batch)
        latency_ms = (time.perf_counter() - started) * 1000.0
        return self._outputs(records, predictions, active, latency_ms)

    def _outputs(
        self, records: list[Record], predictions: np.ndarray, active: ActiveModel, latency_ms: float
    ) -> list[Emit]:
        """One output per record; vectorised where numpy can do it, one header dict shared."""
        fields = self._output_fields
        copied = [k for k in records[0].value if k in fields] if records else []
        rows = predictions.reshape(len(records), -1)
        model_fields = {
            k: v
            for k, v in (
                ("model", active.name),
                ("model_version", active.version),
                ("latency_ms", latency_ms),
            )
            if k in fields
        }
        classes = rows.argmax(axis=1).tolist() if self.class_field else None
        headers = {"streamflow-model": active.tag}
        out: list[Emit] = []
        for index, (record, row) in enumerate(zip(records, rows.tolist(), strict=True)):
            value = record.value
            result = {k: value[k] for k in copied}
            result[self.output_field] = row
            if classes is not None:
                result[self.class_field] = classes[index]
            result.update(model_fields)
            out.append(self.out(result, headers=headers))
        return out
