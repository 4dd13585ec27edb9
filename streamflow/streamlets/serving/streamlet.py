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
# A batch's input tensors for one model, the rows they hold, and the rows that do not fit.
Inputs = tuple[dict[str, np.ndarray], list[int], dict[int, BaseException]]
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
            made = self._model_inputs(active.mapping, batch)
            columns, errors = await self._served_columns(active, batch, made)
            self._served(active, n - len(errors))
            stable = ColumnResult(
                self._with_inputs(columns, batch), errors=errors, headers={MODEL: active.tag}
            )
            if plan is not None:  # a shadow: the candidate's outputs beside, if it makes them
                candidate = plan[1]
                shared = made if _same_inputs(active, candidate) else None
                shadows = await self._shadow_columns(candidate, batch, shared)
                stable.outlets.update(shadows)
                tag = candidate.tag  # the records it failed say so (the evidence counts them)
                if not shadows:
                    stable.headers[FALLBACK] = tag
                elif missed := shadows["shadow"].errors:
                    stable.headers[FALLBACK] = [tag if i in missed else None for i in range(n)]
            return stable
        return await self._split_columns(*plan, active, batch)

    async def _split_columns(
        self, rollout: Rollout, candidate: ActiveModel, active: ActiveModel, batch: ColumnBatch
    ) -> ColumnResult:
        """A canary's (or an AB rollout's) batch: the candidate's keys' rows served by it,
        the others (and any it cannot take) by the stable model, merged back in order."""
        n = batch.n
        chosen = candidate_rows(
            rollout.share,
            candidate.version,
            batch.kafka_keys(),
            lambda: [(p.topic, p.partition, p.offset) for p in batch.places()],
        )
        # the batch's tensors made once, when both models take the same ones and every row
        # fits: each model then gets its rows of them (else each part is encoded alone)
        shared = None
        if _same_inputs(active, candidate):
            made = self._model_inputs(active.mapping, batch)
            shared = None if made[2] else made
        latency = [0.0, 0.0]  # the stable model's call's, the candidate's (ms)
        fell = np.zeros(n, dtype=bool)  # rows the candidate failed: the stable model served
        parts: list[tuple[np.ndarray, dict[str, Any]]] = []
        split_errors: dict[int, BaseException] = {}
        mine, theirs = np.flatnonzero(chosen), np.flatnonzero(~chosen)
        if len(mine):
            part = batch if len(mine) == n else batch.take(mine.tolist())
            try:
                columns, unserved, latency[1] = await self._model_columns(
                    candidate, part, _rows_of(shared, mine, n)
                )
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
                parts.append((mine, columns))
        if len(theirs):
            part = batch if len(theirs) == n else batch.take(theirs.tolist())
            columns, unserved, latency[0] = await self._model_columns(
                active, part, _rows_of(shared, theirs, n)
            )
            parts.append((theirs, columns))  # after the candidate's: its rows win
            split_errors.update({int(theirs[i]): why for i, why in unserved.items()})
        chosen[fell] = False
        # the stable model's errors are all of its own rows (``theirs``, apart from ``chosen``)
        self._served(candidate, int(np.count_nonzero(chosen)))
        self._served(active, len(theirs) - len(split_errors))
        which = chosen.view(np.int8)  # 1: the candidate's row, 0: the stable model's
        pair = (active, candidate)
        headers: dict[str, Any] = {MODEL: _by_row(which, *(m.tag for m in pair))}
        if rollout.mode is RolloutMode.AB:
            headers[ARM] = _by_row(which, rollout.arm(False), rollout.arm(True))
        if fell.any():
            fallback = np.full(n, None, dtype=object)  # None: a row without the header
            fallback[fell] = candidate.tag
            headers[FALLBACK] = fallback
        merged = tensor_arrays.merge_rows(n, parts)
        fields = self._output_fields  # each row's model identity, made whole, not merged
        for name, (stable, cand) in (
            ("model", (active.name, candidate.name)),
            ("model_version", (active.version, candidate.version)),
            ("latency_ms", (latency[0], latency[1])),
        ):
            if name in fields:
                merged[name] = _by_row(which, stable, cand)
        return ColumnResult(self._with_inputs(merged, batch), errors=split_errors, headers=headers)

    async def _shadow_columns(
        self, candidate: ActiveModel, batch: ColumnBatch, made: Inputs | None
    ) -> dict[str, ColumnResult]:
        """The shadow outlet's result of the batch; none when the candidate raises (the
        stable outputs go on without their shadows)."""
        try:
            shadow, unserved = await self._served_columns(candidate, batch, made)
        except Exception as exc:
            self._candidate_failed(candidate, exc, batch.n)
            return {}
        self._served(candidate, batch.n - len(unserved), shadow=True)
        columns = self._with_inputs(shadow, batch)
        return {"shadow": ColumnResult(columns, errors=unserved, headers={MODEL: candidate.tag})}

    def _model_inputs(self, mapping: tensors.BoundMapping, batch: ColumnBatch) -> Inputs:
        """The batch's input tensors for ``mapping``: straight from its columns, else
        through its records, which say which rows do not fit (and why)."""
        n = batch.n
        inputs = mapping.encode_columns(batch)
        if inputs is not None:
            return inputs, list(range(n)), {}
        values = batch.records()  # not plain numbers: the records say which ones do not fit
        try:
            return mapping.encode(values), list(range(n)), {}
        except tensors.RecordErrors as exc:
            errors: dict[int, BaseException] = {
                i: PreprocessError(f"preprocessing failed: {why}") for i, why in exc.errors.items()
            }
        served = [i for i in range(n) if i not in errors]
        if not served:
            return {}, served, errors
        return mapping.encode([values[i] for i in served]), served, errors

    async def _served_columns(
        self, active: ActiveModel, batch: ColumnBatch, made: Inputs | None = None
    ) -> tuple[dict[str, Any], dict[int, BaseException]]:
        """What ``active`` makes of the batch, as the outlet's columns (its own fields
        and the model's identity); the rows that do not fit its inputs, with why.
        ``made``: the batch's inputs for this model, if they are made already."""
        columns, errors, latency_ms = await self._model_columns(active, batch, made)
        if columns:
            fields, n = self._output_fields, batch.n
            for name, value in (
                ("model", active.name),
                ("model_version", active.version),
                ("latency_ms", latency_ms),
            ):
                if name in fields:
                    columns[name] = np.full(n, value, dtype=_dtype(value))
        return columns, errors

    async def _model_columns(
        self, active: ActiveModel, batch: ColumnBatch, made: Inputs | None
    ) -> tuple[dict[str, Any], dict[int, BaseException], float]:
        """The model's output columns of the batch (none: it served no row), the rows
        that do not fit its inputs, and how long its call took (ms)."""
        n = batch.n
        mapping = active.mapping
        inputs, served, errors = made or self._model_inputs(mapping, batch)
        if not served:
            return {}, errors, 0.0
        started = time.perf_counter()
        outputs = await active.predictor.infer(inputs)
        latency_ms = (time.perf_counter() - started) * 1000.0
        columns = mapping.decode_columns(outputs, len(served), scalar_fields=self._scalar_fields)
        if errors:  # back to a row per input: the failed ones' rows are never written
            columns = {
                k: tensor_arrays.spread_rows(column, served, n) for k, column in columns.items()
            }
        return columns, errors, latency_ms

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


def _same_inputs(active: ActiveModel, candidate: ActiveModel) -> bool:
    """Whether the two models' mappings make the same tensors of a batch (and refuse the
    same rows): a mapping's encoding is its inputs' specs, whatever model it is bound to."""
    mapping, other = active.mapping, candidate.mapping
    return type(mapping) is type(other) and mapping.inputs == other.inputs


def _rows_of(made: Inputs | None, rows: np.ndarray, n: int) -> Inputs | None:
    """``rows`` of a batch's inputs, every row of which fits (all rows: the inputs)."""
    if made is None or len(rows) == n:
        return made
    return {name: tensor[rows] for name, tensor in made[0].items()}, list(range(len(rows))), {}


def _by_row(which: np.ndarray, stable: Any, candidate: Any) -> np.ndarray:
    """A column of ``candidate`` where ``which`` is 1, ``stable`` where it is 0."""
    column: np.ndarray = np.array([stable, candidate], dtype=_dtype(stable))[which]
    return column


def _dtype(value: Any) -> type | None:
    """A column's dtype for copies of ``value``: text is kept as objects."""
    return object if isinstance(value, str) else None
