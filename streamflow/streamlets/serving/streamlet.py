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
from collections.abc import Mapping
from typing import Any

import numpy as np

from streamflow.api import params
from streamflow.api.columns import ColumnBatch, ColumnResult
from streamflow.api.ports import Emit, Inlet, Outlet
from streamflow.api.streamlet import Context, Record
from streamflow.models import tensors
from streamflow.schema import SchemaStore
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower

__all__ = ["ModelServing", "NoModelError", "PreprocessError"]

log = logging.getLogger("streamflow.streamlets.serving")


class NoModelError(Exception):
    """A data record arrived before any model was loaded (with ``on_no_model: dlq``)."""


class PreprocessError(Exception):
    """One record could not be turned into the model's inputs; it goes to the dead letters."""


class ModelServing(ModelFollower):
    """Serves a model switched live by ModelDescriptor records on the `model` control inlet.

    Override :meth:`preprocess` and :meth:`postprocess` (both per batch, vectorised)
    to shape what the tensor mapping cannot: tokenising, scaling, joining outputs.
    """

    inp = Inlet("in", description="records with the model's input features")
    out = Outlet("out", description="the input's fields plus the prediction and model version")

    columns_outlet = "out"  # process_columns writes here; `status` is the swaps' own

    output_field = params.Str(
        default="probabilities", description="shorthand: the field for the only output's row"
    )
    class_field = params.Str(
        default="", description="shorthand: the field for the argmax class (optional)"
    )

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._output_fields: set[str] = set()
        self._scalar_fields: frozenset[str] = frozenset()

    def setup(self, context: Context) -> None:
        super().setup(context)
        store = context.schema_store if context.schema_store is not None else SchemaStore()
        schema = store.get(type(self).out.schema)
        self._output_fields = set(schema.field_names())
        self._scalar_fields = tensors.scalar_fields(schema.raw)

    def tensor_mapping(self) -> tensors.TensorMapping:
        if self.outputs and self.class_field:
            raise tensors.MappingError("set outputs or the class_field shorthand, not both")
        mapping = tensors.TensorMapping.from_config(
            inputs=self.inputs,
            outputs=self.outputs,
            input_fields=self.input_fields,
            output_field=self.output_field,
            class_field=self.class_field,
        )
        if not mapping.outputs:
            raise tensors.MappingError(
                "the mapping writes no output: set outputs, or output_field/class_field"
            )
        return mapping

    @classmethod
    def check_mapping(
        cls, mapping: tensors.TensorMapping, schemas: Mapping[str, Mapping[str, Any]]
    ) -> list[tensors.SchemaProblem]:
        return tensors.check_schemas(
            mapping, input_schema=schemas.get("in"), output_schema=schemas.get("out")
        )

    # -- the hooks ---------------------------------------------------------------------

    def preprocess(self, records: list[Record]) -> dict[str, np.ndarray]:
        """The model's named input arrays for a batch (default: the tensor mapping).

        Raise for a batch with bad records; each record is then tried alone, and those
        that still fail go to the dead-letter topic while the rest are served.
        """
        assert self.current is not None
        return self.current.mapping.encode([r.value for r in records])

    def postprocess(self, records: list[Record], outputs: dict[str, np.ndarray]) -> list[dict]:  # type: ignore[type-arg]
        """One output record per input (default: the mapped outputs beside the input's fields)."""
        assert self.current is not None
        decoded = self.current.mapping.decode(
            outputs, len(records), scalar_fields=self._scalar_fields
        )
        fields = self._output_fields
        copied = [k for k in records[0].value if k in fields] if records else []
        return [
            {**{k: r.value[k] for k in copied}, **prediction}
            for r, prediction in zip(records, decoded, strict=True)
        ]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Hooks written per record: the batch goes as records to them (process_batch).
        if cls.preprocess is not ModelServing.preprocess or (
            cls.postprocess is not ModelServing.postprocess
        ):
            cls.process_columns = None  # type: ignore[assignment]

    # -- the batch, as columns (the default: no dict per record) ------------------------

    async def process_columns(self, batch: ColumnBatch) -> ColumnResult:
        """The batch straight from its columns to the model and back (see
        :mod:`streamflow.api.columns`); a subclass with its own :meth:`preprocess` or
        :meth:`postprocess` is served through :meth:`process_batch` instead."""
        await self.close_retired()
        active = self.current
        n = batch.n
        if active is None:
            failed = NoModelError("no model is loaded yet (on_no_model: dlq)")
            return ColumnResult({}, errors=dict.fromkeys(range(n), failed))
        mapping = active.mapping
        errors: dict[int, BaseException] = {}
        served = list(range(n))
        inputs = mapping.encode_columns(batch)
        if inputs is None:  # not plain numbers: the records say which ones do not fit
            values = batch.records()
            try:
                inputs = mapping.encode(values)
            except tensors.RecordErrors as exc:
                errors = {
                    i: PreprocessError(f"preprocessing failed: {why}")
                    for i, why in exc.errors.items()
                }
                served = [i for i in served if i not in errors]
                if not served:
                    return ColumnResult({}, errors=errors)
                inputs = mapping.encode([values[i] for i in served])
        started = time.perf_counter()
        outputs = await active.predictor.infer(inputs)
        latency_ms = (time.perf_counter() - started) * 1000.0
        columns = mapping.decode_columns(outputs, len(served), scalar_fields=self._scalar_fields)
        if errors:  # back to a row per input: the failed ones' rows are never written
            columns = {k: _spread(column, served, n) for k, column in columns.items()}
        fields = self._output_fields
        for path in batch:  # the input's fields the output also has (a nested record whole)
            if path.split(".", 1)[0] in fields and path.split(".", 1)[0] not in columns:
                columns[path] = batch[path]
        for name, value in (
            ("model", active.name),
            ("model_version", active.version),
            ("latency_ms", latency_ms),
        ):
            if name in fields:
                columns[name] = np.full(n, value, dtype=object if isinstance(value, str) else None)
        return ColumnResult(columns, errors=errors, headers={"streamflow-model": active.tag})

    # -- the batch, as records ------------------------------------------------------------

    async def process_batch(self, records: list[Record]) -> list[Any]:
        await self.close_retired()
        active = self.current
        if active is None:
            raise NoModelError("no model is loaded yet (on_no_model: dlq)")
        results: list[Any] = [None] * len(records)
        inputs, served = self._inputs(records, results)
        if not served:
            return results
        kept = [records[i] for i in served]
        started = time.perf_counter()
        outputs = await active.predictor.infer(inputs)
        latency_ms = (time.perf_counter() - started) * 1000.0
        emitted = self._outputs(self.postprocess(kept, outputs), active, latency_ms)
        for index, emit in zip(served, emitted, strict=True):
            results[index] = emit
        return results

    def _inputs(
        self, records: list[Record], results: list[Any]
    ) -> tuple[dict[str, np.ndarray], list[int]]:
        """The inputs of the records that preprocess; the others' results become errors."""
        try:
            return self.preprocess(records), list(range(len(records)))
        except tensors.RecordErrors as exc:
            failed = exc.errors
        except Exception:
            failed = {}
            for index, record in enumerate(records):
                try:
                    self.preprocess([record])
                except Exception as single:
                    failed[index] = f"{type(single).__name__}: {single}"
            if not failed:  # only the whole batch fails (ragged rows): serve them one by one
                raise
        for index, reason in failed.items():
            results[index] = PreprocessError(f"preprocessing failed: {reason}")
        served = [i for i in range(len(records)) if i not in failed]
        if not served:
            return {}, []
        return self.preprocess([records[i] for i in served]), served

    def _outputs(
        self, predictions: list[dict[str, Any]], active: ActiveModel, latency_ms: float
    ) -> list[Emit]:
        """Each prediction with the model's identity; one header dict shared by the batch."""
        fields = self._output_fields
        model_fields = {
            k: v
            for k, v in (
                ("model", active.name),
                ("model_version", active.version),
                ("latency_ms", latency_ms),
            )
            if k in fields
        }
        headers = {"streamflow-model": active.tag}
        out = []
        for prediction in predictions:  # fresh dicts from postprocess: completed in place
            prediction.update(model_fields)
            out.append(self.out(prediction, headers=headers))
        return out


def _spread(column: Any, rows: list[int], n: int) -> np.ndarray:
    """``column``'s values at ``rows`` of a column of ``n`` (the other rows left empty)."""
    values = np.asarray(column)
    spread = np.zeros((n, *values.shape[1:]), dtype=values.dtype)
    spread[rows] = values
    return spread
