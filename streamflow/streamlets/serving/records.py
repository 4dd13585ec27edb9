"""The serving streamlet's record path: a batch through the per-record hooks.

A subclass that overrides :meth:`~.streamlet.ModelServing.preprocess` or
:meth:`~.streamlet.ModelServing.postprocess` is served here, record by record
through its hooks, rather than by the columnar path (:mod:`.streamlet`). During a
rollout the batch is split the same way: the candidate serves its keys' records (or
a shadow of all, to the ``shadow`` outlet), a record it cannot take is served by the
stable model and says so (``streamflow-fallback``), and every output names its version.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Record
from streamflow.models import tensors
from streamflow.models.rollout import Rollout, RolloutMode, candidate_rows
from streamflow.streamlets.served_by import ARM, FALLBACK, MODEL
from streamflow.streamlets.serving.active import ActiveModel

__all__ = ["NoModelError", "PreprocessError", "RecordServing"]


class NoModelError(Exception):
    """A data record arrived before any model was loaded (with ``on_no_model: dlq``)."""


class PreprocessError(Exception):
    """One record could not be turned into the model's inputs; it goes to the dead letters."""


class RecordServing:
    """The record path of :class:`~.streamlet.ModelServing` (a mixin: its other half)."""

    _in_use: ActiveModel | None  # the model a hook call serves
    _output_fields: set[str]

    if TYPE_CHECKING:  # what the streamlet itself provides
        out: Outlet
        shadow: Outlet

        @property
        def current(self) -> ActiveModel | None: ...

        async def close_retired(self) -> None: ...

        def preprocess(self, records: list[Record]) -> dict[str, np.ndarray]: ...

        def postprocess(
            self, records: list[Record], outputs: dict[str, np.ndarray]
        ) -> list[dict]: ...  # type: ignore[type-arg]

        def _plan(self) -> tuple[Rollout, ActiveModel] | None: ...

        def _served(self, model: ActiveModel, records: int, *, shadow: bool = False) -> None: ...

        def _candidate_failed(self, candidate: ActiveModel, exc: Exception, rows: int) -> None: ...

    @property
    def model_in_use(self) -> ActiveModel | None:
        """The model the current call serves: the stable one, or during a rollout the
        candidate for its share of the batch (what the default hooks map with)."""
        return self._in_use or self.current

    async def process_batch(self, records: list[Record]) -> list[Any]:
        """The batch through the hooks; its outputs counted per version once it is done
        (a batch that raises is run again record by record, and counted then)."""
        await self.close_retired()
        active = self.current
        if active is None:
            raise NoModelError("no model is loaded yet (on_no_model: dlq)")
        results, by = await self._served_batch(active, records)
        for model, shadow, served in by:
            self._served(
                model,
                sum(1 for r in served if not isinstance(r, BaseException | None)),
                shadow=shadow,
            )
        return results

    async def _served_batch(
        self, active: ActiveModel, records: list[Record]
    ) -> tuple[list[Any], list[tuple[ActiveModel, bool, list[Any]]]]:
        """The batch's results, and who served which of them (model, a shadow?, results)."""
        plan = self._plan()
        if plan is None:
            results = await self._served_records(active, records)
            return results, [(active, False, results)]
        rollout, candidate = plan
        if rollout.mode is RolloutMode.SHADOW:
            stable = await self._served_records(active, records)
            try:
                shadows = await self._served_records(candidate, records, outlet=self.shadow)
            except Exception as exc:  # the stable outputs go on without their shadows
                self._candidate_failed(candidate, exc, len(records))
                stable = [_fell_back(result, candidate) for result in stable]
                return stable, [(active, False, stable)]
            # a record the candidate fails keeps its stable output alone (no dead letter),
            # and one the stable model fails has no shadow either
            paired = [
                shadow if not isinstance(result, BaseException | None) else None
                for result, shadow in zip(stable, shadows, strict=True)
            ]
            both: list[Any] = []
            for result, shadow in zip(stable, shadows, strict=True):
                if isinstance(result, BaseException | None) or shadow is None:
                    both.append(result)
                elif isinstance(shadow, BaseException):  # it failed this one: said, and counted
                    both.append(_fell_back(result, candidate))
                else:
                    both.append([result, shadow])
            return both, [(active, False, stable), (candidate, True, paired)]
        chosen = candidate_rows(
            rollout.share,
            candidate.version,
            [r.key_bytes for r in records],
            [(r.topic, r.partition, r.offset) for r in records],
        )
        results = [None] * len(records)
        by = []
        fell: set[int] = set()  # records the candidate refused: the stable model serves them
        refused: list[int] = []
        for pick, model in ((True, candidate), (False, active)):
            rows = [i for i in range(len(records)) if chosen[i] == pick]
            if not rows:
                continue
            try:
                served = await self._served_records(
                    model, [records[i] for i in rows], arm=rollout.arm(pick)
                )
            except Exception as exc:
                if model is active:
                    raise
                self._candidate_failed(candidate, exc, len(rows))  # the stable model serves all
                results = await self._served_records(active, records, arm=rollout.arm(False))
                results = [
                    _fell_back(result, candidate) if chosen[i] else result
                    for i, result in enumerate(results)
                ]
                return results, [(active, False, results)]
            if model is candidate:  # records it cannot take: the stable model serves them
                refused = [row for row, r in zip(rows, served, strict=True) if _refused(r)]
                if refused:
                    first = next(r for r in served if _refused(r))
                    self._candidate_failed(candidate, first, len(refused))
                    chosen[refused] = False
                    served = [None if _refused(r) else r for r in served]
            else:
                served = [
                    _fell_back(r, candidate) if row in fell else r
                    for row, r in zip(rows, served, strict=True)
                ]
            by.append((model, False, served))
            for row, result in zip(rows, served, strict=True):
                if result is not None or model is active:
                    results[row] = result
            fell = set(refused) if model is candidate else set()
        return results, by

    async def _served_records(
        self,
        active: ActiveModel,
        records: list[Record],
        *,
        outlet: Outlet | None = None,
        arm: str = "",
    ) -> list[Any]:
        """What ``active`` makes of these records through the hooks: an output (to
        ``outlet``, ``out`` by default) or an error per record."""
        self._in_use = active
        try:
            results: list[Any] = [None] * len(records)
            inputs, served = self._inputs(records, results)
            if not served:
                return results
            kept = [records[i] for i in served]
            started = time.perf_counter()
            outputs = await active.predictor.infer(inputs)
            latency_ms = (time.perf_counter() - started) * 1000.0
            predictions = self.postprocess(kept, outputs)
        finally:
            self._in_use = None
        emitted = self._outputs(predictions, active, latency_ms, outlet or self.out, arm)
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
        self,
        predictions: list[dict[str, Any]],
        active: ActiveModel,
        latency_ms: float,
        outlet: Outlet,
        arm: str = "",
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
        headers = {MODEL: active.tag, ARM: arm} if arm else {MODEL: active.tag}
        out = []
        for prediction in predictions:  # fresh dicts from postprocess: completed in place
            prediction.update(model_fields)
            out.append(outlet(prediction, headers=headers))
        return out


def _refused(result: Any) -> bool:
    """A record a model could not take as input (its own mapping refused it)."""
    return isinstance(result, PreprocessError)


def _fell_back(result: Any, candidate: ActiveModel) -> Any:
    """A stable output of a record the candidate failed, saying so (``streamflow-fallback``)."""
    if not isinstance(result, Emit):
        return result
    return dataclasses.replace(result, headers={**(result.headers or {}), FALLBACK: candidate.tag})
