"""The model-serving streamlet: a dynamically controlled stream.

Data records flow through ``in`` → ``out``; ``ModelDescriptor`` records on
the ``model`` control inlet switch the model live. The state is the current
model: embedded (Keras or SavedModel) or remote (a V1 or V2 model server).
How a descriptor is checked, loaded off the hot path and swapped in between
batches lives in :mod:`.follower`, shared with the explanation streamlet;
this module is the data half: one vectorised inference per batch, and every
output names the version that produced it. A subclass with its own per-record hooks
is served through the record path (:mod:`.records`) instead.

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
from streamflow.api.ports import Inlet, Outlet
from streamflow.api.streamlet import Context, Record
from streamflow.models import tensor_arrays, tensors
from streamflow.models.rollout import Rollout, RolloutMode, candidate_rows
from streamflow.schema import SchemaStore
from streamflow.streamlets.served_by import ARM, FALLBACK, MODEL
from streamflow.streamlets.serving.active import ActiveModel
from streamflow.streamlets.serving.candidate import CandidateSlot
from streamflow.streamlets.serving.follower import ModelFollower, close_model
from streamflow.streamlets.serving.metrics import RolloutMetrics
from streamflow.streamlets.serving.records import NoModelError, PreprocessError, RecordServing

__all__ = ["ModelServing", "NoModelError", "PreprocessError"]

log = logging.getLogger("streamflow.streamlets.serving")
SHADOW_DESCRIPTION = "a shadowed candidate's outputs, as `out` has them (unused otherwise)"


class ModelServing(RecordServing, ModelFollower):
    """Serves a model switched live by ModelDescriptor records on the `model` control inlet.

    Override :meth:`preprocess` and :meth:`postprocess` (both per batch, vectorised)
    to shape what the tensor mapping cannot: tokenising, scaling, joining outputs.
    """

    inp = Inlet("in", description="records with the model's input features")
    out = Outlet("out", description="the input's fields plus the prediction and model version")
    # a subclass's ``out`` schema is the shadow's too (``__init_subclass__``)
    shadow = Outlet("shadow", description=SHADOW_DESCRIPTION, optional=True)

    columns_outlet = "out"  # process_columns writes here; `status` is the swaps' own

    output_field = params.Str(
        default="probabilities", description="shorthand: the field for the only output's row"
    )
    class_field = params.Str(
        default="", description="shorthand: the field for the argmax class (optional)"
    )
    max_resident_mb = params.Int(
        default=0,
        min=0,
        description="a rollout's candidate is unloaded if, with it, the replica holds more "
        "than this resident (0: no bound)",
    )

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._output_fields: set[str] = set()
        self._scalar_fields: frozenset[str] = frozenset()
        self._in_use: ActiveModel | None = None  # the model a hook call serves
        self._rollout_metrics = RolloutMetrics(lambda: self.context)

    def candidate_slot(self) -> CandidateSlot:
        return CandidateSlot(
            lambda descriptor, cancelled: self._load(descriptor, cancelled),
            close=close_model,
            max_resident_bytes=self.max_resident_mb * 2**20,
        )

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
        model = self.model_in_use
        assert model is not None
        return model.mapping.encode([r.value for r in records])

    def postprocess(self, records: list[Record], outputs: dict[str, np.ndarray]) -> list[dict]:  # type: ignore[type-arg]
        """One output record per input (default: the mapped outputs beside the input's fields)."""
        model = self.model_in_use
        assert model is not None
        decoded = model.mapping.decode(outputs, len(records), scalar_fields=self._scalar_fields)
        fields = self._output_fields
        copied = [k for k in records[0].value if k in fields] if records else []
        return [
            {**{k: r.value[k] for k in copied}, **prediction}
            for r, prediction in zip(records, decoded, strict=True)
        ]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        out = cls.__dict__.get("out")
        if isinstance(out, Outlet) and out.schema and "shadow" not in cls.__dict__:
            shadow = Outlet("shadow", out.schema, description=SHADOW_DESCRIPTION, optional=True)
            shadow.__set_name__(cls, "shadow")
            cls.shadow = shadow
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
        :meth:`postprocess` is served through :meth:`process_batch` instead. While a
        rollout runs, the candidate serves its share of the rows (or a shadow of all)."""
        await self.close_retired()
        active = self.current
        n = batch.n
        if active is None:
            failed = NoModelError("no model is loaded yet (on_no_model: dlq)")
            return ColumnResult({}, errors=dict.fromkeys(range(n), failed))
        plan = self._plan()
        if plan is None or plan[0].mode is RolloutMode.SHADOW:
            columns, errors = await self._served_columns(active, batch)
            self._served(active, n - len(errors))
            stable = ColumnResult(
                self._with_inputs(columns, batch), errors=errors, headers={MODEL: active.tag}
            )
            if plan is not None:  # a shadow: the candidate's outputs beside, if it makes them
                shadows = await self._shadow_columns(plan[1], batch)
                stable.outlets.update(shadows)
                tag = plan[1].tag  # the records it failed say so (the evidence counts them)
                if not shadows:
                    stable.headers[FALLBACK] = tag
                elif missed := shadows["shadow"].errors:
                    stable.headers[FALLBACK] = [tag if i in missed else None for i in range(n)]
            return stable
        rollout, candidate = plan
        keys = batch.kafka_keys()
        places = (
            [(p.topic, p.partition, p.offset) for p in batch.places()] if None in keys else None
        )
        chosen = candidate_rows(rollout.share, candidate.version, keys, places)
        fell = np.zeros(n, dtype=bool)  # rows the candidate failed: the stable model served
        parts: list[tuple[np.ndarray, dict[str, Any], ActiveModel]] = []
        split_errors: dict[int, BaseException] = {}
        mine, theirs = np.flatnonzero(chosen), np.flatnonzero(~chosen)
        if len(mine):
            part = batch if len(mine) == n else batch.take(mine.tolist())
            try:
                columns, unserved = await self._served_columns(candidate, part)
            except Exception as exc:  # the candidate failed the batch: the stable model serves
                self._candidate_failed(candidate, exc, len(mine))
                fell[mine], unserved, columns = True, {}, {}
                mine, theirs = mine[:0], np.arange(n)
            if unserved:  # rows the candidate cannot take: the stable model serves them
                first = next(iter(unserved.values()))
                self._candidate_failed(candidate, first, len(unserved))  # type: ignore[arg-type]
                refused = mine[sorted(unserved)]
                fell[refused] = True
                theirs = np.sort(np.concatenate([theirs, refused]))
            if len(mine) and columns:  # a column per row it was given: the stable part's win
                parts.append((mine, columns, candidate))
        if len(theirs):
            part = batch if len(theirs) == n else batch.take(theirs.tolist())
            columns, unserved = await self._served_columns(active, part)
            parts.append((theirs, columns, active))  # after the candidate's: its rows win
            split_errors.update({int(theirs[i]): why for i, why in unserved.items()})
        chosen[fell] = False
        for model, rows in ((candidate, np.flatnonzero(chosen)), (active, theirs)):
            self._served(model, sum(1 for r in rows.tolist() if r not in split_errors))
        headers: dict[str, Any] = {MODEL: np.where(chosen, candidate.tag, active.tag)}
        if rollout.mode is RolloutMode.AB:
            headers[ARM] = np.where(chosen, rollout.arm(True), rollout.arm(False))
        if fell.any():
            headers[FALLBACK] = np.array([candidate.tag if f else None for f in fell], dtype=object)
        merged = self._with_inputs(
            tensor_arrays.merge_rows(n, [(rows, columns) for rows, columns, _ in parts]), batch
        )
        return ColumnResult(merged, errors=split_errors, headers=headers)

    async def _shadow_columns(
        self, candidate: ActiveModel, batch: ColumnBatch
    ) -> dict[str, ColumnResult]:
        """The shadow outlet's result of the batch; none when the candidate raises (the
        stable outputs go on without their shadows)."""
        try:
            shadow, unserved = await self._served_columns(candidate, batch)
        except Exception as exc:
            self._candidate_failed(candidate, exc, batch.n)
            return {}
        self._served(candidate, batch.n - len(unserved), shadow=True)
        columns = self._with_inputs(shadow, batch)
        return {"shadow": ColumnResult(columns, errors=unserved, headers={MODEL: candidate.tag})}

    async def _served_columns(
        self, active: ActiveModel, batch: ColumnBatch
    ) -> tuple[dict[str, Any], dict[int, BaseException]]:
        """What ``active`` makes of the batch, as the outlet's columns (its own fields
        and the model's identity); the rows that do not fit its inputs, with why."""
        n = batch.n
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
                    return {}, errors
                inputs = mapping.encode([values[i] for i in served])
        started = time.perf_counter()
        outputs = await active.predictor.infer(inputs)
        latency_ms = (time.perf_counter() - started) * 1000.0
        columns = mapping.decode_columns(outputs, len(served), scalar_fields=self._scalar_fields)
        if errors:  # back to a row per input: the failed ones' rows are never written
            columns = {
                k: tensor_arrays.spread_rows(column, served, n) for k, column in columns.items()
            }
        fields = self._output_fields
        for name, value in (
            ("model", active.name),
            ("model_version", active.version),
            ("latency_ms", latency_ms),
        ):
            if name in fields:
                columns[name] = np.full(n, value, dtype=object if isinstance(value, str) else None)
        return columns, errors

    def _with_inputs(self, columns: dict[str, Any], batch: ColumnBatch) -> dict[str, Any]:
        """``columns`` and the input's fields the output also has (a nested record whole)."""
        fields = self._output_fields
        for path in batch:
            top = path.split(".", 1)[0]
            if top in fields and top not in columns:
                columns[path] = batch[path]
        return columns

    def _publish_model(self) -> None:
        super()._publish_model()
        self._plan()  # the candidate's share, now: a rollout may end with no traffic after

    def _plan(self) -> tuple[Rollout, ActiveModel] | None:
        """The rollout this batch serves under, if one runs (its share shown as a gauge)."""
        plan = self.candidates.plan() if self.candidates is not None else None
        self._rollout_metrics.show(plan)
        return plan

    def _served(self, model: ActiveModel, records: int, *, shadow: bool = False) -> None:
        self._rollout_metrics.served(model, records, shadow=shadow)

    def _candidate_failed(self, candidate: ActiveModel, exc: Exception, rows: int) -> None:
        self._rollout_metrics.candidate_failed(candidate, exc, rows)
