"""The explanation streamlet: attributions for a chosen few predictions, beside the model.

It reads what the model reads, follows the serving streamlet's own
``ModelDescriptor`` topic (the loading, switching and status rules are
serving's, from :class:`~streamflow.streamlets.serving.follower.ModelFollower`),
so it always explains the version that is serving, and writes an
``Explanation`` for each record it chooses (see :mod:`.selection`).

Work is bounded per batch by a time budget, so a slow explainer sheds
records (counted as ``streamflow_records_skipped{reason="budget"}``) rather
than growing memory or lag. Explaining runs on a worker thread while the
event loop stays free, which is what lets SHAP's synchronous KernelExplainer
call a remote model through the asynchronous serving client.

Inputs come through the tensor mapping it shares with serving (``inputs``, or
the flat ``input_fields``). Integrated gradients explain float tensors of any
shape (an image and a feature vector at once), one ``Explanation`` per input;
text and integer inputs are held at each record's value, because no
attribution method applies to them (:mod:`.scope` decides, once per model, and
says so on the status outlet; such records count as
``skipped{reason="not-applicable"}``). A method the model cannot support
(gradients of a remote or non-differentiable model) falls back to
``shap-kernel`` where that applies, with the reason on the status outlet, or,
with ``fallback: none``, fails the load and keeps the old model.

Bind the input port by subclassing; add a drift inlet to explain more while
a detector reports drift::

    class WineExplainer(ModelExplainer):
        inp = Inlet("in", "examples.wine.WineFeatures")
        drift = ControlInlet("drift", "streamflow.ml.DriftReport")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from streamflow.api import params
from streamflow.api.columns import columns_of, read_as_columns
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Backpressure, Context, Record
from streamflow.models import remote, tensors
from streamflow.models.kinds import ModelState
from streamflow.streamlets import datasets
from streamflow.streamlets.explain import gradients, methods, runners, scope
from streamflow.streamlets.explain.background import BASELINES, Background, background_rows
from streamflow.streamlets.explain.predicate import Predicate
from streamflow.streamlets.explain.selection import Budget, Selector
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower
from streamflow.streamlets.serving.streamlet import NoModelError

__all__ = ["METHODS", "ModelExplainer"]

log = logging.getLogger("streamflow.streamlets.explain")

_BACKGROUND = "background"  # the state key: a partition's rows of the first-records background

METHODS = scope.METHODS


class ModelExplainer(ModelFollower):
    """Explains sampled or interesting predictions of the model the `model` inlet names."""

    # a background taken from the first records survives a restart (see _restore_background)
    stateful = True
    out = Outlet("out", "streamflow.ml.Explanation")

    method = params.Choice(METHODS, default="integrated-gradients", description="how to explain")
    fallback = params.Choice(
        ("shap-kernel", "none"),
        default="shap-kernel",
        description="for a model the gradient methods cannot explain; none: refuse the model",
    )
    steps = params.Int(default=64, min=2, description="integrated gradients: path steps")
    baseline = params.Choice(
        BASELINES,
        default="auto",
        description="the baseline: auto (mean for feature vectors, zeros for tensors), mean, ...",
    )
    baseline_values = params.List(params.Float(), default=[], description="an explicit baseline")
    explained_output = params.Str(
        default="", description="the model output explained; empty: its only or first mapped one"
    )
    target = params.Int(default=-1, min=-1, description="the output explained; -1: the argmax")
    sample_rate = params.Float(default=0.05, min=0.0, max=1.0, description="share explained")
    low_confidence = params.Float(
        default=0.0, min=0.0, max=1.0, description="always explain below this top probability"
    )
    when = params.Str(default="", description="always explain records matching this expression")
    drift_rate = params.Float(default=1.0, min=0.0, max=1.0, description="share while drifted")
    budget = params.Duration(default="1s", description="explaining time per batch")
    background = params.Str(
        default="", description="background dataset: a URL or a local path; empty: first records"
    )
    background_sha256 = params.Str(default="", description="the background dataset's sha256")
    background_size = params.Int(default=200, min=1, description="background rows")
    background_clusters = params.Int(default=10, min=1, description="k-means summary for Kernel")
    samples = params.Int(default=256, min=8, description="SHAP samples per record")
    explainer_url = params.Str(default="", description="remote: a KServe V1 explainer's server")
    explainer_model = params.Str(default="", description="remote: its model name (default: ours)")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        read_as_columns(cls, "in")  # a batch's tensors are read straight from its columns

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        # the latest verdict of each detector, source and partition (a detector's windows
        # are per input partition: one partition's "no drift" does not clear another's)
        self._drift: dict[tuple[str, str, int], bool] = {}
        self._runner: tuple[str, runners.Explain] | None = None
        self._explainer: remote.InferenceClient | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="explain")

    def setup(self, context: Context) -> None:
        super().setup(context)
        layout = scope.Layout.of(self.tensors.inputs)
        self.selector = Selector(
            sample_rate=self.sample_rate,
            drift_rate=self.drift_rate,
            low_confidence=self.low_confidence,
            predicate=Predicate(self.when) if self.when else None,
        )
        self.budget_clock = Budget(seconds=self.budget.total_seconds())
        self.backdrop = Background(size=self.background_size, features=layout.features)
        if self.baseline_values:  # a wrong length is a config mistake: say so at start
            if not layout.features:
                raise ValueError("baseline_values needs float inputs of fixed shape")
            self.backdrop.baseline(self.baseline, self.baseline_values)
        if self.method == "remote":
            if not self.explainer_url:
                raise ValueError("method remote needs explainer_url, a KServe V1 explainer")
            self._explainer = remote.InferenceClient(
                protocol=remote.V1,
                base_url=self.explainer_url,
                model=self.explainer_model or "model",
                settings=self.client_settings(),
            )
            context.on_close(self._explainer.aclose)
        # integrated gradients from zeros need no background: don't fetch one for nothing
        uses = self.method.startswith("shap") or self.baseline in ("mean", "median")
        if self.background and (uses or (self.baseline == "auto" and layout.tabular)):
            self._load_background(layout)

    def _load_background(self, layout: scope.Layout) -> None:
        cache = Path(self.cache_dir or Path.home() / ".cache" / "streamflow" / "datasets")
        location, allowlist = self.background, list(self.allowlist)
        if "://" not in location:  # a path in the streamlet's own config is trusted
            location = Path(location).resolve().as_uri()
            allowlist.append(location)
        try:
            rows = background_rows(
                layout,
                location=location,
                sha256=self.background_sha256 or None,
                allowlist=allowlist,
                cache_dir=cache,
            )
            self.backdrop.use(rows, origin=self.background)
        except (datasets.DatasetError, ValueError) as exc:
            log.warning(
                "background %s unusable, using the first records instead: %s", self.background, exc
            )
        self.context.set_state("background", self.backdrop.origin)

    async def teardown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        await super().teardown()

    # -- control ---------------------------------------------------------------

    def on_control(self, inlet: str, record: Record) -> Emit | list[Emit] | None:
        if inlet == "drift":
            report = record.value
            offsets = report["window"]["offsets"]
            partition = int(offsets[0]["partition"]) if offsets else -1
            key = (report["detector"], report["source"], partition)
            self._drift[key] = bool(report["drifted"])
            return None
        return super().on_control(inlet, record)

    def prepare(self, active: ActiveModel) -> scope.Plan:
        """On the load thread: how this model will be explained (see :mod:`.scope`)."""
        layout = scope.Layout.of(active.mapping.inputs)
        output = (
            scope.explained_output(active.mapping, self.explained_output) if layout.specs else ""
        )

        def probe() -> str:  # asked only of a model that has gradients
            model = active.predictor.gradients
            if model is None:
                return "it exposes no gradients"
            return gradients.no_gradient(
                model.call,
                active.mapping.zeros(1),
                explained=layout.explained,
                output=output,
            )

        return scope.plan(
            self.method,
            tag=active.tag,
            fallback=self.fallback,
            layout=layout,
            predictor=active.predictor,
            output=output,
            baseline=self.baseline,
            explicit_baseline=bool(self.baseline_values),
            probe=probe,
        )

    def between_batches(self) -> Emit | list[Emit] | None:
        result = super().between_batches()  # one at most: an explainer keeps no candidate
        if (
            isinstance(result, Emit)
            and result.value["state"] == ModelState.SERVING
            and self.current is not None
        ):
            note = self.current.extra.note
            if note:  # once per model: when it starts serving
                log.warning("model %s: %s", self.current.tag, note)
                result.value["message"] += f"; {note}"
        return result

    # -- data ------------------------------------------------------------------

    async def process_batch(self, records: list[Record]) -> list[Any]:
        await self.close_retired()
        active = self.current
        if active is None:
            raise NoModelError("no model is loaded yet (on_no_model: dlq)")
        plan: scope.Plan = active.extra
        results: list[Any] = [None] * len(records)
        if plan.method == "none":  # said on load; counted for every record
            self.context.count_skipped("not-applicable", count=len(records))
            return results
        kept, inputs = self._encode(active, records)
        batch = [records[i] for i in kept]
        layout = plan.layout
        has_rows = batch and layout.features  # ragged inputs have no feature rows to keep
        x = layout.flatten(inputs) if has_rows else np.zeros((len(batch), self.backdrop.features))
        self._restore_background()
        background = self._staged_background(x)
        predictions = None
        if batch and self.selector.needs_predictions:
            predictions = await self._predict(active, plan, inputs)
        chosen = self.selector.choose(
            batch, predictions=predictions, drifted=any(self._drift.values())
        )
        skipped = {
            "sampled-out": len(batch) - len(chosen),
            "invalid-input": len(records) - len(kept),
        }
        if plan.needs_background:
            # A record is explained once the background, filled in record order up to and
            # including it, is full: the same records whatever the batch sizes were.
            ready_from = self._background_full_from(x)
            skipped["no-background-yet"] = sum(c.index < ready_from for c in chosen)
            chosen = [c for c in chosen if c.index >= ready_from]
        taken = chosen[: self.budget_clock.affordable(len(chosen))]
        done = 0
        if taken:
            rows = np.array([c.index for c in taken], dtype=np.int64)
            subset = {name: array[rows] for name, array in inputs.items()}
            outputs = (
                predictions[rows]
                if predictions is not None
                else await self._predict(active, plan, subset)
            )
            targets = self._targets(outputs)
            started = time.perf_counter()
            deadline = time.monotonic() + self.budget.total_seconds()
            loop = asyncio.get_running_loop()
            explained = await self._explain(
                active, plan, subset, targets, background, deadline, loop
            )
            took = time.perf_counter() - started
            done = len(explained.baseline_output)
            self.budget_clock.spent(took, done)
            reference = self._baselines(plan, background)
            for offset, choice in enumerate(taken[:done]):
                values = runners.explanations(
                    batch[choice.index],
                    reason=choice.reason,
                    active=active,
                    plan=plan,
                    inputs={name: array[offset] for name, array in subset.items()},
                    attributions={name: v[offset] for name, v in explained.values.items()},
                    baselines=reference,
                    prediction=outputs[offset],
                    target=int(targets[offset]),
                    baseline_output=float(explained.baseline_output[offset]),
                    latency_ms=took * 1000 / done,
                )
                headers = {"streamflow-model": active.tag}
                results[kept[choice.index]] = [self.out(v, headers=headers) for v in values]
        skipped["budget"] = len(chosen) - done
        # records explained without their text (or other non-float) inputs count as well
        skipped["not-applicable"] = done if plan.fixed else 0
        self._commit(x, skipped, batch)
        return results

    def _encode(
        self, active: ActiveModel, records: list[Record]
    ) -> tuple[list[int], dict[str, np.ndarray]]:
        """The batch's input tensors, and which records they are (those the mapping fits):
        straight from the columns the batch was decoded into where it can be, else (a
        column not of the mapping's shape, records built by hand) record by record."""
        batch = columns_of(records)
        if batch is not None and (tensors_ := active.mapping.encode_columns(batch)) is not None:
            return list(range(len(records))), tensors_
        values = [r.value for r in records]
        try:
            return list(range(len(records))), active.mapping.encode(values)
        except tensors.RecordErrors as exc:
            kept = [i for i in range(len(records)) if i not in exc.errors]
            log.debug("%d record(s) do not fit the mapping: %s", len(exc.errors), exc)
        if not kept:
            return [], {name: np.zeros((0,)) for name in active.mapping.inputs}
        return kept, active.mapping.encode([values[i] for i in kept])

    def _staged_background(self, x: np.ndarray) -> np.ndarray:
        """The background as it will be once this batch is committed (nothing changes yet)."""
        if self.backdrop.ready:
            return self.backdrop.rows
        finite = x[np.isfinite(x).all(axis=1)]
        return np.concatenate([self.backdrop.rows, finite])[: self.backdrop.size]

    def _background_full_from(self, x: np.ndarray) -> int:
        """The first row of this batch from which the staged background is full."""
        missing = self.backdrop.size - len(self.backdrop.rows)
        if missing <= 0:
            return 0
        filled = np.cumsum(np.isfinite(x).all(axis=1))
        return int(np.searchsorted(filled, missing)) if len(filled) else 0

    def _commit(self, x: np.ndarray, skipped: dict[str, int], batch: list[Record]) -> None:
        """Only once the batch cannot be retried: a retried batch must not count twice."""
        if x.shape[1] == self.backdrop.features and self.backdrop.from_records:
            taken = self.backdrop.add(x)
            # each row kept goes to the state of its record's partition (written with the
            # batch, so a batch handed back leaves nothing there)
            for partition in sorted({batch[i].partition for i in taken.tolist()}):
                rows = x[[i for i in taken.tolist() if batch[i].partition == partition]]
                store = self.state.partition(batch[0].inlet, partition)
                kept = store.get(_BACKGROUND)
                store.set(_BACKGROUND, rows if kept is None else np.concatenate([kept, rows]))
        for reason, count in skipped.items():
            self.context.count_skipped(reason, count=count)

    def _restore_background(self) -> None:
        """While it fills from the first records, the background is what the stores of the
        partitions held now keep: after a restart, a handed-back batch or a rebalance alike."""
        if self.backdrop.ready or not self.backdrop.from_records or not self.backdrop.features:
            return
        kept = [self.state.partition(i, p).get(_BACKGROUND) for i, p in self.state.held()]
        rows = [np.asarray(k, dtype=np.float32) for k in kept if k is not None]
        self.backdrop.restore(
            np.concatenate(rows) if rows else np.zeros((0, self.backdrop.features))
        )

    async def _predict(
        self, active: ActiveModel, plan: scope.Plan, inputs: dict[str, np.ndarray]
    ) -> np.ndarray:
        """The explained output for each record, flattened: (n, values per record)."""
        outputs = await active.predictor.infer(inputs)
        chosen = np.asarray(gradients.pick_output(outputs, plan.output))
        return chosen.reshape(len(chosen), -1).astype(np.float64)

    def _targets(self, outputs: np.ndarray) -> np.ndarray:
        outputs = outputs.reshape(len(outputs), -1)
        if self.target >= 0:
            return np.full(len(outputs), min(self.target, outputs.shape[1] - 1), dtype=np.int64)
        chosen: np.ndarray = np.argmax(outputs, axis=1).astype(np.int64)
        return chosen

    async def _explain(
        self,
        active: ActiveModel,
        plan: scope.Plan,
        inputs: dict[str, np.ndarray],
        targets: np.ndarray,
        background: np.ndarray,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> gradients.TensorAttributions:
        if plan.method == "remote":
            return await self._remote_explain(plan, plan.layout.flatten(inputs), targets)

        def work() -> gradients.TensorAttributions:
            runner = self._runner_for(active, plan, background, loop)
            if plan.method != "shap-kernel":  # vectorised: one pass for the whole batch
                return runner(inputs, targets)
            parts: list[gradients.TensorAttributions] = []
            for row in range(len(targets)):  # one by one, so the budget can stop it
                if parts and time.monotonic() > deadline:
                    break
                one = {name: array[row : row + 1] for name, array in inputs.items()}
                parts.append(runner(one, targets[row : row + 1]))
            return gradients.TensorAttributions(
                {n: np.concatenate([p.values[n] for p in parts]) for n in plan.explained},
                np.concatenate([p.baseline_output for p in parts]),
            )

        return await loop.run_in_executor(self._pool, work)

    async def _remote_explain(
        self, plan: scope.Plan, x: np.ndarray, targets: np.ndarray
    ) -> gradients.TensorAttributions:
        assert self._explainer is not None
        model = self.explainer_model or (self.current.name if self.current else "model")
        url = remote.explain_url(
            self.explainer_url, model
        )  # the name is quoted: it may be anything
        try:
            values, expected = await self._explainer.call(x, parse=methods.parse_explain, url=url)
        except Backpressure as exc:
            raise Backpressure(
                f"the remote explainer {url} is unavailable: {exc}", retry_after=exc.retry_after
            ) from None
        if values.ndim == 3:  # per output: take each row's target
            values = values[np.minimum(targets, len(values) - 1), np.arange(len(x))]
        base = (
            expected[np.minimum(targets, len(expected) - 1)]
            if expected is not None
            else np.full(len(x), np.nan)
        )
        return runners.tensor_attributions(plan.layout, methods.Attributions(values, base))

    def _baselines(self, plan: scope.Plan, background: np.ndarray) -> dict[str, np.ndarray] | None:
        values = self.baseline_values
        explicit = self.backdrop.baseline("values", values) if values else None
        return runners.baselines(plan, background=background, explicit=explicit)

    def _runner_for(
        self,
        active: ActiveModel,
        plan: scope.Plan,
        background: np.ndarray,
        loop: asyncio.AbstractEventLoop,
    ) -> runners.Explain:
        """The explaining function for this model, built once per model version."""
        if self._runner is None or self._runner[0] != active.tag:
            baselines = self._baselines(plan, background)
            assert baselines is not None
            runner = runners.build(
                plan,
                active,
                baselines=baselines,
                background=background,
                steps=self.steps,
                samples=self.samples,
                clusters=self.background_clusters,
                loop=loop,
            )
            self._runner = (active.tag, runner)
        return self._runner[1]
