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

A method the model cannot support (gradients of a remote or non-differentiable
model) falls back to ``shap-kernel`` with the reason on the status outlet, or,
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
from streamflow.api.ports import Emit, Outlet
from streamflow.api.streamlet import Backpressure, Context, Record
from streamflow.streamlets import datasets
from streamflow.streamlets.explain import methods, runners
from streamflow.streamlets.explain.background import BASELINES, Background
from streamflow.streamlets.explain.predicate import Predicate
from streamflow.streamlets.explain.selection import Budget, Selector
from streamflow.streamlets.serving import remote
from streamflow.streamlets.serving.follower import ActiveModel, ModelFollower
from streamflow.streamlets.serving.streamlet import NoModelError

__all__ = ["METHODS", "ModelExplainer"]

log = logging.getLogger("streamflow.streamlets.explain")

METHODS = ("integrated-gradients", "shap-gradient", "shap-kernel", "remote")
_GRADIENT = ("integrated-gradients", "shap-gradient")


class ExplainError(Exception):
    """A model the configured method cannot explain (with ``fallback: none``)."""


class ModelExplainer(ModelFollower):
    """Explains sampled or interesting predictions of the model the `model` inlet names."""

    out = Outlet("out", "streamflow.ml.Explanation")

    method = params.Choice(METHODS, default="integrated-gradients", description="how to explain")
    fallback = params.Choice(
        ("shap-kernel", "none"),
        default="shap-kernel",
        description="for a model the gradient methods cannot explain; none: refuse the model",
    )
    steps = params.Int(default=64, min=2, description="integrated gradients: path steps")
    baseline = params.Choice(BASELINES, default="mean", description="the baseline's statistic")
    baseline_values = params.List(params.Float(), default=[], description="an explicit baseline")
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

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._drift: dict[tuple[str, str], bool] = {}
        self._runner: tuple[str, runners.Explain] | None = None
        self._explainer: remote.InferenceClient | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="explain")

    def setup(self, context: Context) -> None:
        super().setup(context)
        features = len(self.input_fields)
        self.selector = Selector(
            sample_rate=self.sample_rate,
            drift_rate=self.drift_rate,
            low_confidence=self.low_confidence,
            predicate=Predicate(self.when) if self.when else None,
        )
        self.budget_clock = Budget(seconds=self.budget.total_seconds())
        self.backdrop = Background(size=self.background_size, features=features)
        if self.baseline_values:  # a wrong length is a config mistake: say so at start
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
        if self.background:
            self._load_background()

    def _load_background(self) -> None:
        cache = Path(self.cache_dir or Path.home() / ".cache" / "streamflow" / "datasets")
        location, allowlist = self.background, list(self.allowlist)
        if "://" not in location:  # a path in the streamlet's own config is trusted
            location = Path(location).resolve().as_uri()
            allowlist.append(location)
        try:
            columns = datasets.load_columns(
                location=location,
                sha256=self.background_sha256 or None,
                allowlist=allowlist,
                cache_dir=cache,
                numeric=self.input_fields,
            )
            matrix = np.column_stack([columns[f] for f in self.input_fields])
            self.backdrop.use(matrix, origin=self.background)
        except (datasets.DatasetError, ValueError) as exc:
            log.warning(
                "background %s unusable, using the first records instead: %s", self.background, exc
            )
        self.context.set_state("background", self.backdrop.origin)

    async def teardown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._explainer is not None:
            await self._explainer.aclose()
        await super().teardown()

    # -- control ---------------------------------------------------------------

    def on_control(self, inlet: str, record: Record) -> Emit | None:
        if inlet == "drift":
            report = record.value
            self._drift[(report["detector"], report["source"])] = bool(report["drifted"])
            return None
        return super().on_control(inlet, record)

    def prepare(self, active: ActiveModel) -> runners.Plan:
        """On the load thread: the method this model will be explained with."""
        method = self.method
        if method not in _GRADIENT:
            return runners.Plan(method)
        is_remote = isinstance(active.predictor, remote.InferenceClient)
        if is_remote:
            reason = "a remote model exposes no gradients"
        elif method == "shap-gradient" and active.predictor.keras_model is None:
            reason = "SHAP's GradientExplainer needs a Keras model"
        else:
            reason = methods.differentiable(active.predictor, features=len(self.input_fields))
        if not reason:
            return runners.Plan(method)
        if self.fallback == "none":
            raise ExplainError(f"{method} cannot explain {active.tag}: {reason}")
        return runners.Plan(
            "shap-kernel", f"{method} cannot explain it ({reason}); using shap-kernel"
        )

    def between_batches(self) -> Emit | None:
        result = super().between_batches()
        if result is not None and result.value["state"] == "serving" and self.current is not None:
            note = self.current.extra.note
            if note:
                log.warning("model %s: %s", self.current.tag, note)
                result.value["message"] += f"; {note}"
        return result

    # -- data ------------------------------------------------------------------

    async def process_batch(self, records: list[Record]) -> list[Emit | None]:
        await self.close_retired()
        active = self.current
        if active is None:
            raise NoModelError("no model is loaded yet (on_no_model: dlq)")
        loop = asyncio.get_running_loop()
        x = np.array(
            [[_number(r.value.get(f)) for f in self.input_fields] for r in records],
            dtype=np.float32,
        )
        background = self._staged_background(x)
        predictions = None
        if self.selector.needs_predictions:
            predictions = await self._predict(active, x)
        chosen = self.selector.choose(
            records, predictions=predictions, drifted=any(self._drift.values())
        )
        results: list[Emit | None] = [None] * len(records)
        plan: runners.Plan = active.extra
        needs_background = self.backdrop.needed_for(
            method=plan.method, baseline=self.baseline, explicit=bool(self.baseline_values)
        )
        if needs_background and len(background) < self.backdrop.size:
            self._commit(x, sampled_out=len(records) - len(chosen), waiting=len(chosen))
            return results
        taken = chosen[: self.budget_clock.affordable(len(chosen))]
        rows = np.array([c.index for c in taken], dtype=np.int64)
        if taken:
            outputs = (
                predictions[rows]
                if predictions is not None
                else await self._predict(active, x[rows])
            )
            targets = self._targets(outputs)
            started = time.perf_counter()
            deadline = time.monotonic() + self.budget.total_seconds()
            explained = await self._explain(
                active, plan, x[rows], targets, background, deadline, loop
            )
            took = time.perf_counter() - started
            done = len(explained.values)
            self.budget_clock.spent(took, done)
            reference_row = self._baseline(plan, background)
            for offset, choice in enumerate(taken[:done]):
                value = runners.explanation(
                    records[choice.index],
                    reason=choice.reason,
                    active=active,
                    plan=plan,
                    features=self.input_fields,
                    x=x[choice.index],
                    prediction=outputs[offset],
                    target=int(targets[offset]),
                    attributions=explained.values[offset],
                    baseline_output=float(explained.baseline_output[offset]),
                    baseline=reference_row,
                    latency_ms=took * 1000 / done,
                )
                results[choice.index] = self.out(value, headers={"streamflow-model": active.tag})
            taken = taken[:done]
        self._commit(x, sampled_out=len(records) - len(chosen), shed=len(chosen) - len(taken))
        return results

    def _staged_background(self, x: np.ndarray) -> np.ndarray:
        """The background as it will be once this batch is committed (nothing changes yet)."""
        if self.backdrop.ready:
            return self.backdrop.rows
        finite = x[np.isfinite(x).all(axis=1)]
        return np.concatenate([self.backdrop.rows, finite])[: self.backdrop.size]

    def _commit(self, x: np.ndarray, *, sampled_out: int, shed: int = 0, waiting: int = 0) -> None:
        """Only once the batch cannot be retried: a retried batch must not count twice."""
        self.backdrop.add(x)
        self.context.count_skipped("sampled-out", count=sampled_out)
        self.context.count_skipped("budget", count=shed)
        self.context.count_skipped("no-background-yet", count=waiting)

    async def _predict(self, active: ActiveModel, x: np.ndarray) -> np.ndarray:
        if isinstance(active.predictor, remote.InferenceClient):
            predicted: np.ndarray = await active.predictor.predict(x)
            return predicted
        return np.asarray(active.predictor.predict(x))

    def _targets(self, outputs: np.ndarray) -> np.ndarray:
        outputs = outputs.reshape(len(outputs), -1)
        if self.target >= 0:
            return np.full(len(outputs), min(self.target, outputs.shape[1] - 1), dtype=np.int64)
        chosen: np.ndarray = np.argmax(outputs, axis=1).astype(np.int64)
        return chosen

    async def _explain(
        self,
        active: ActiveModel,
        plan: runners.Plan,
        x: np.ndarray,
        targets: np.ndarray,
        background: np.ndarray,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> methods.Attributions:
        if plan.method == "remote":
            return await self._remote_explain(x, targets)

        def work() -> methods.Attributions:
            runner = self._runner_for(active, plan, background, loop)
            if plan.method != "shap-kernel":  # vectorised: one pass for the whole batch
                return runner(x, targets)
            parts: list[methods.Attributions] = []
            for row in range(len(x)):  # one by one, so the budget can stop it
                if parts and time.monotonic() > deadline:
                    break
                parts.append(runner(x[row : row + 1], targets[row : row + 1]))
            return methods.Attributions(
                np.concatenate([p.values for p in parts]),
                np.concatenate([p.baseline_output for p in parts]),
            )

        return await loop.run_in_executor(self._pool, work)

    async def _remote_explain(self, x: np.ndarray, targets: np.ndarray) -> methods.Attributions:
        assert self._explainer is not None
        model = self.explainer_model or (self.current.name if self.current else "model")
        url = f"{self.explainer_url.rstrip('/')}/v1/models/{model}:explain"
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
        return methods.Attributions(values, base)

    def _runner_for(
        self,
        active: ActiveModel,
        plan: runners.Plan,
        background: np.ndarray,
        loop: asyncio.AbstractEventLoop,
    ) -> runners.Explain:
        """The explaining function for this model, built once per model version."""
        if self._runner is None or self._runner[0] != active.tag:
            runner = runners.build(
                plan,
                active,
                baseline=self._baseline(plan, background),
                background=background,
                steps=self.steps,
                samples=self.samples,
                clusters=self.background_clusters,
                loop=loop,
            )
            self._runner = (active.tag, runner)
        return self._runner[1]

    def _baseline(self, plan: runners.Plan, background: np.ndarray) -> np.ndarray | None:
        """Per feature: the IG baseline, SHAP's background mean, or None (remote)."""
        if plan.method == "remote":
            return None
        if plan.method != "integrated-gradients":
            return np.asarray(np.mean(background, axis=0), dtype=np.float32)
        if self.baseline_values or self.baseline == "zeros":
            return self.backdrop.baseline(self.baseline, self.baseline_values)
        statistic = np.median if self.baseline == "median" else np.mean
        return np.asarray(statistic(background, axis=0), dtype=np.float32)


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float("nan")
    return float(value)
