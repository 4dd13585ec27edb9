"""The drift-detection streamlet: windowed data drift and streaming signals, beside the model.

It reads what the model reads (``in``), what it answers (``outputs``) and,
optionally, the truth (``labels``, joined to outputs by key), and writes one
``DriftReport`` per window to ``reports`` and each change of verdict to
``alerts``. It is off the serving hot path: a slow test delays reports, never
predictions.

Two control inlets make it a dynamically controlled stream like serving:
``control`` takes ``DriftConfig`` records (a new reference, features, tests,
window, alpha), loaded off the hot path and swapped in between batches,
with each step on ``status``; ``model`` takes the serving streamlet's own
``ModelDescriptor`` topic. A report names the version that made the
predictions in its window, taken from the predictions themselves, never the
version the detector happens to hold when the window closes (it may lag the
classifier); windows never span two versions (:mod:`.versions`).

``inputs`` reads tensors and text through serving's tensor mapping
(:mod:`.inputs`): per-element KS and an MMD over whole tensors, and length,
vocabulary and out-of-vocabulary statistics for text.

Bind the data ports by subclassing; declare the ones you have::

    class WineDrift(DriftDetector):
        inp = Inlet("in", "examples.wine.WineFeatures")
        outputs = Inlet("outputs", "examples.wine.WinePrediction")
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from streamflow.api import params
from streamflow.api.columns import read_as_columns
from streamflow.api.descriptor import describe
from streamflow.api.ports import ControlInlet, Emit, Outlet
from streamflow.api.streamlet import ConfigProblem, Context, Record, Streamlet
from streamflow.models import artifacts, locations, remote, tensors
from streamflow.models.kinds import ModelState
from streamflow.models.status import status_record
from streamflow.models.swap import LiveSwap
from streamflow.schema import SchemaStore
from streamflow.streamlets import datasets
from streamflow.streamlets.drift import (
    batch,
    detect,
    durable,
    judge,
    loading,
    sources,
    versions,
    windows,
)
from streamflow.streamlets.drift import inputs as tensor_inputs
from streamflow.streamlets.drift.batch import INPUTS, LABELS, OUTPUTS
from streamflow.streamlets.drift.settings import TESTS, DriftSettings
from streamflow.streamlets.drift.signals import LabelJoin, OutputSignals, SignalMonitor

__all__ = ["DriftDetector"]

log = logging.getLogger("streamflow.streamlets.drift")

_REPORT = "streamflow.ml.DriftReport"


def _report_key(report: Mapping[str, Any]) -> str:
    """detector:source:partition: a compacted alerts topic keeps each one's latest verdict."""
    partition = report["window"]["offsets"][0]["partition"]
    return f"{report['detector']}:{report['source']}:{partition}"


class DriftDetector(Streamlet):
    """Reports data drift per window, and changes in prediction signals, for a served model."""

    # windows, first-N references and verdicts survive a restart (see .durable)
    stateful = True
    # the model's inputs arrive as columns too: the windows read numbers and tensors from
    # them, with no record-by-record pass (set for subclasses that bind `in`, below)
    column_inlets: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        read_as_columns(cls, INPUTS)

    control = ControlInlet("control", "streamflow.ml.DriftConfig")
    model = ControlInlet("model", "streamflow.ml.ModelDescriptor")
    reports = Outlet("reports", _REPORT, key=_report_key)
    alerts = Outlet("alerts", _REPORT, key=_report_key)
    status = Outlet("status", "streamflow.ml.ModelStatus", key=lambda r: r["model"])

    detector = params.Str(default="", description="the detector's name (default: the streamlet's)")
    numeric = params.List(params.Str(), default=[], description="numeric input features (KS, PSI)")
    categorical = params.List(
        params.Str(), default=[], description="categorical input features (chi-squared, PSI)"
    )
    inputs = params.Mapping(
        check=tensors.parse_inputs,
        default={},
        description="model input -> {field, dtype, shape, pad, max_len}: tensors and text",
    )
    tests = params.List(
        params.Choice(TESTS, default="ks"), default=list(TESTS), description="tests to run"
    )
    window = params.Int(default=500, min=2, description="records per window")
    step = params.Int(default=0, min=0, description="records between windows; 0: tumbling")
    alpha = params.Float(default=0.05, min=0.0, max=1.0, description="false-alarm rate per window")
    correction = params.Choice(
        ("bonferroni", "fdr", "none"), default="bonferroni", description="across the tests"
    )
    psi_threshold = params.Float(default=0.25, min=0.0, description="PSI that marks drift")
    psi_bins = params.Int(default=10, min=2, description="quantile bins of the PSI")
    reference = params.Str(
        default="", description="reference dataset: a URL or a local path; empty: the first N"
    )
    reference_sha256 = params.Str(default="", description="the reference dataset's sha256")
    reference_format = params.Choice(
        datasets.FORMATS, default="auto", description="auto: by the extension"
    )
    reference_size = params.Int(
        default=1000, min=2, description="N: records in a first-N reference"
    )
    allowlist = params.List(
        params.Str(),
        default=[],
        description="allowed locations, scheme://host[:port][/path], as serving's allowlist",
    )
    cache_dir = params.Str(default="", description="dataset cache (default ~/.cache/streamflow)")
    probabilities_field = params.Str(default="probabilities", description="outputs: probabilities")
    class_field = params.Str(default="predicted", description="outputs: the predicted class")
    label_field = params.Str(default="label", description="outputs and labels: the true class")
    join_capacity = params.Int(
        default=10_000, min=1, description="predictions awaiting a label; inputs, their prediction"
    )
    permutations = params.Int(default=500, min=20, description="of a tensor's MMD test")
    mmd_rows = params.Int(default=300, min=10, description="rows per side of the MMD, at most")
    vocabulary = params.Int(default=50, min=1, description="top tokens compared in text")
    oov_threshold = params.Float(
        default=0.1, min=0.0, max=1.0, description="out-of-vocabulary rate that marks drift"
    )
    adwin_delta = params.Float(default=0.002, min=0.0, max=1.0, description="ADWIN confidence")
    ph_threshold = params.Float(default=50.0, min=0.0, description="Page-Hinkley threshold")
    ph_delta = params.Float(default=0.005, min=0.0, description="Page-Hinkley tolerance")
    detector_url = params.Str(
        default="", description="a hosted detector's server (V2); remote mode"
    )
    detector_model = params.Str(default="drift", description="the hosted detector's model name")
    timeout = params.Duration(default="5s", description="per request to the hosted detector")
    retries = params.Int(default=2, min=0, description="retries of a failed request")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.settings = DriftSettings(name="")
        # what a partition of each watched inlet starts from; its own state is in _tracked
        self.sources: dict[str, sources.Source] = {}
        self._partitions = durable.Partitions()
        self._fields: dict[str, set[str]] = {}
        self._model: tuple[str, int] = ("", 0)
        self._swap: LiveSwap[DriftSettings, loading.Loaded] = LiveSwap(
            lambda settings, _cancelled: self._load(settings),
            close=_close_loaded,
            thread_name="drift-load",
        )
        self._signals = SignalMonitor(adwin_delta=0.002, ph_threshold=50.0, ph_delta=0.005)
        self._outputs = OutputSignals(self._signals, LabelJoin(capacity=1))
        self._names: dict[int, str] = {}  # model names by version
        self._join = versions.VersionJoin(capacity=1)
        self._name = ""
        self._trusted: list[str] = []  # the deploy-time config's own dataset, allowed as given

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def check_config(
        cls, config: Mapping[str, Any], *, schemas: Mapping[str, Mapping[str, Any]]
    ) -> list[ConfigProblem]:
        """``inputs`` against the ``in`` port, as serving checks its own: at verify; and a
        warning per allowlist entry looser than it looks (any port, no path end)."""
        return [
            *tensor_inputs.config_problems(config, schemas=schemas),
            *locations.config_problems(config.get("allowlist") or []),
        ]

    def setup(self, context: Context) -> None:
        store = context.schema_store if context.schema_store is not None else SchemaStore()
        declared = {p.name: p.schema for p in describe(type(self)).inlets}
        if INPUTS not in declared and OUTPUTS not in declared:
            raise ValueError("declare an `in` inlet, an `outputs` inlet, or both, to watch")
        self._fields = {n: set(store.get(s).field_names()) for n, s in declared.items()}
        self._signals = SignalMonitor(
            adwin_delta=self.adwin_delta, ph_threshold=self.ph_threshold, ph_delta=self.ph_delta
        )
        self._outputs = OutputSignals(self._signals, LabelJoin(capacity=self.join_capacity))
        self._join = versions.VersionJoin(capacity=self.join_capacity)
        settings = DriftSettings.from_params(
            self,
            name=self.detector or context.streamlet,
            reference=self._own_location(self.reference),
            inputs=tuple(tensors.parse_inputs(self.inputs).values()) if self.inputs else (),
        )
        problems = settings.problems(fields=self._fields)
        if problems:
            raise ValueError("; ".join(problems))
        self._name = settings.name
        self._swap.submit(settings)
        context.on_close(self._swap.close)

    async def teardown(self) -> None:
        self._swap.shutdown()

    @property
    def _client(self) -> remote.InferenceClient | None:
        """The hosted detector's client, in remote mode."""
        return self._swap.current.client if self._swap.current else None

    def accepts_data(self) -> bool:
        return bool(self.sources)  # held only until the first settings are in place

    # -- control ---------------------------------------------------------------

    def on_control(self, inlet: str, record: Record) -> Emit | None:
        if inlet == "model":
            name, version = record.value["name"], record.value["version"]
            self._names.setdefault(version, name)
            if version > self._model[1]:
                self._model = (name, version)
                self.context.set_state("model", f"{name}:{version}")
            return None
        config = record.value
        if config["name"] != self._name:
            return None  # a config for another detector sharing the topic
        pending = self._swap.pending
        newest = max(self.settings.version, pending.version if pending else 0)
        if config["version"] <= newest:
            return self._status(
                config, ModelState.REJECTED, f"version {config['version']} is not newer"
            )
        # merged over one still loading, which is then superseded: nothing it set is lost
        settings = (pending or self.settings).merged(config)
        problems = settings.problems(fields=self._fields)
        for location in (settings.reference_location, settings.detector_url):
            if location and not artifacts.allowed(_as_prefix(location), self.allowlist):
                problems.append(f"{location!r} is not in the allowlist")
        if problems:
            return self._status(config, ModelState.REJECTED, "; ".join(problems))
        self._swap.submit(settings)
        return self._status(
            config, ModelState.LOADING, settings.reference_location or "first records"
        )

    def between_batches(self) -> Emit | None:
        swapped = self._swap.poll()
        if swapped is None:
            return None
        settings, loaded, exc = swapped.spec, swapped.loaded, swapped.error
        config = {"name": settings.name, "version": settings.version}
        if loaded is None:
            keeping = self._describe() if self.sources else "no reference"
            if not self.sources:  # the first settings failed: watch without a reference
                self._install(settings, None, f"{type(exc).__name__}: {exc}")
            return self._status(
                config, ModelState.FAILED, f"{type(exc).__name__}: {exc}; keeping {keeping}"
            )
        self._install(settings, loaded.reference, "")
        return self._status(config, ModelState.SERVING, self._describe())

    def _load(self, settings: DriftSettings) -> loading.Loaded:
        """On the worker thread: the reference dataset and the hosted detector, checked."""
        return loading.load(
            settings,
            allowlist=[*self.allowlist, *self._trusted],
            cache_dir=Path(self.cache_dir or Path.home() / ".cache" / "streamflow" / "datasets"),
            timeout=self.timeout.total_seconds(),
            retries=self.retries,
        )

    def _own_location(self, location: str) -> str | None:
        """A path in the streamlet's own config is trusted; the allowlist guards control records."""
        if not location or "://" in location:
            return location or None
        uri = Path(location).resolve().as_uri()
        self._trusted.append(uri)
        return uri

    def _install(
        self,
        settings: DriftSettings,
        loaded: detect.Reference | None,
        problem: str,
    ) -> None:
        # rows toward a window, and inputs awaiting their prediction, were cut for the old
        # settings; the predictions' versions are kept for the inputs still to come
        dropped = self._partitions.filled + self._join.waiting_rows
        self.context.count_skipped("drift-config-change", count=dropped)
        self._partitions.clear()
        self._join = self._join.without_waiting()
        self.settings = settings
        self.sources = {}
        if INPUTS in self._fields:
            self.sources[INPUTS] = sources.Source.start(
                "inputs",
                settings,
                layout=settings.layout,
                reference=loaded,
                problem=problem,
                hosted=self._client is not None,  # the hosted detector holds its own reference
            )
        if OUTPUTS in self._fields:
            layout = sources.output_layout(self.class_field)
            self.sources[OUTPUTS] = sources.Source.start("outputs", settings, layout=layout)
        self.context.set_state("drift-config", f"{settings.name}:{settings.version}")

    def _describe(self) -> str:
        return sources.summary(
            self.sources.values(), self.settings, hosted=self._client is not None
        )

    # -- data ------------------------------------------------------------------

    async def process_batch(self, records: list[Record]) -> list[list[Emit] | None]:
        await self._swap.close_retired()
        current = self._partitions.current(self.state, self.sources, self.settings)
        planned = batch.plan(
            records,
            current,
            self._join.copy(),  # committed below, once every window is evaluated
            settings=self.settings,
            descriptor=self._model,
            fields=self._output_fields,
        )
        # evaluate before committing anything: a hosted detector that is down raises
        # Backpressure, and the whole batch is retried with the state it started from
        client, settings = self._client, self.settings
        verdicts = [
            await judge.features(
                planned.sources[role].part(judge.partition(window)),
                window,
                client=client,
                settings=settings,
            )
            for role, window, _ in planned.windows
        ]
        ends: dict[int, list[tuple[str, windows.Window, list[dict[str, Any]] | str]]] = {}
        for (role, window, position), features in zip(planned.windows, verdicts, strict=True):
            ends.setdefault(position, []).append((role, window, features))
        results: list[list[Emit] | None] = [None] * len(records)
        self._names.update(planned.names)
        drifted = self._partitions.verdicts()
        classes = iter(planned.classes)
        for index, record in enumerate(records):
            if record.inlet == OUTPUTS and OUTPUTS in self.sources:
                self._outputs.output(
                    record.key,
                    probabilities=record.value.get(self.probabilities_field),
                    predicted=next(classes),
                    label=record.value.get(self.label_field),
                )
            elif record.inlet == LABELS:
                self._outputs.label(record.key, record.value.get(self.label_field))
            for role, window, tested in ends.get(index, []):
                signals = self._signals.report() if role == OUTPUTS else []
                key = (role, judge.partition(window))
                version = int(window.rows.version.max()) if len(window.rows) else 0  # one a window
                report, alert = judge.judge(
                    planned.sources[role].part(key[1]),
                    window,
                    tested,
                    signals,
                    was=drifted.get(key, False),
                    settings=settings,
                    model=(self._names.get(version) or self._model[0], version),
                    context=self.context,
                )
                drifted[key] = bool(report["drifted"])
                emitted = [self.reports(report), *([self.alerts(report)] if alert else [])]
                results[index] = [*(results[index] or []), *emitted]
        self._partitions.commit(
            self.state,
            current,
            planned.sources,
            drifted,
            settings=self.settings,
            moved=lambda rows: self.context.count_skipped("drift-partition-moved", count=rows),
        )
        self._join = planned.join
        if planned.refused:
            self.context.count_skipped("drift-unreadable-input", count=planned.refused)
        return results

    @property
    def _output_fields(self) -> sources.OutputFields:
        return sources.OutputFields(self.probabilities_field, self.class_field, self.label_field)

    def _status(self, config: dict[str, Any], state: ModelState, message: str) -> Emit:
        replica = f"{self.context.streamlet}-{self.context.replica}"
        return self.status(
            status_record(
                model=config["name"],
                version=config["version"],
                state=state,
                message=message,
                replica=replica,
                log=log,
                what="drift config",
            )
        )


async def _close_loaded(loaded: loading.Loaded) -> None:
    if loaded.client is not None:
        await loaded.client.aclose()


def _as_prefix(location: str) -> str:
    return location if "." in location.rsplit("/", 1)[-1] else location.rstrip("/") + "/"
