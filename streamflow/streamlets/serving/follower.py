"""Following the current model: the control half of the dynamically controlled stream.

Serving, explaining and anything else that must use *the model that is
serving* share this base: a ``model`` control inlet of ``ModelDescriptor``
records, a ``status`` outlet of ``ModelStatus`` records, and the rules for
switching. Keeping one copy of those rules is what lets an explainer fed from
the serving streamlet's control topic always explain the same version.

A new descriptor is checked (newer version? allowed location? a digest for
it? an allowed kind?) when it arrives, then loaded and warmed up on a worker
thread while the old model keeps working. Whoever can write the control topic
chooses what every replica loads and which hosts it calls, so each check is
repeated where it is used, and what a load may cost is bounded (see
SECURITY.md). A newer descriptor supersedes a load still under way: the old
one is reported ``superseded`` at once and its download stops, so a stuck
artifact never holds back a later version. The swap happens in
``between_batches``, which the runtime calls before every batch, so a batch
always sees one model. A load that fails leaves the old model in place; each
step is reported on ``status`` and in the log. The mechanism (worker, cancel,
swap, retire) is :class:`~streamflow.models.swap.LiveSwap`, which the drift
detector follows its settings with too; what is checked and reported is here.
Subclasses add their data ports and ``process_batch``, and may hook
:meth:`ModelFollower.prepare` to build per-model state on the worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamflow.api import params
from streamflow.api.ports import ControlInlet, Emit, Inlet, Outlet
from streamflow.api.streamlet import ConfigProblem, Context, Record, Streamlet
from streamflow.models import admission, artifacts, limits, remote, tensors
from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.embedded import load_embedded
from streamflow.models.kinds import EMBEDDED_KINDS, REMOTE_KINDS, ModelState
from streamflow.models.predictor import Predictor
from streamflow.models.rollout import RolloutMode
from streamflow.models.status import status_record
from streamflow.models.swap import LiveSwap
from streamflow.streamlets.serving import checks
from streamflow.streamlets.serving.active import ActiveModel
from streamflow.streamlets.serving.candidate import CandidateSlot, Report

__all__ = ["ActiveModel", "ModelFollower", "close_model"]

log = logging.getLogger("streamflow.streamlets.serving")
STABLE, CANDIDATE = "stable", "candidate"  # a status's role


class ModelFollower(Streamlet):
    """Holds the model named by the newest valid ModelDescriptor on the `model` control inlet."""

    inp = Inlet("in", description="records with the model's input features")
    model = ControlInlet("model", "streamflow.ml.ModelDescriptor")
    out = Outlet("out", description="what the streamlet makes of each record")
    status = Outlet("status", "streamflow.ml.ModelStatus", key=lambda r: r["model"])

    inputs = params.Mapping(
        check=tensors.parse_inputs,
        default={},
        description="model input -> {field, dtype, shape, pad, max_len}",
    )
    outputs = params.Mapping(
        check=tensors.parse_outputs,
        default={},
        description="model output -> {field, transform: raw|argmax|top_k|threshold, k, labels}",
    )
    input_fields = params.List(
        params.Str(), default=[], description="shorthand: flat float fields, in order"
    )
    on_no_model = params.Choice(
        ("wait", "dlq"), default="wait", description="hold data until a model is ready, or DLQ"
    )
    allowlist = params.List(
        params.Str(),
        default=[],
        description="allowed locations, scheme://host[:port][/path]: the host exactly, "
        "no port = the default one, 'host:' = any port, the path by whole segments; "
        "verify warns of an entry without its port or a trailing '/'",
    )
    cache_dir = params.Str(default="", description="artifact cache (default ~/.cache/streamflow)")
    remote_batch_size = params.Int(default=64, min=1, description="instances per request")
    concurrency = params.Int(default=4, min=1, description="requests in flight at once")
    timeout = params.Duration(
        default="5s", description="per request to a model server, and per read of a download"
    )
    retries = params.Int(default=2, min=0, description="retries of a failed request")
    breaker_failures = params.Int(default=3, min=1, description="failures that open the circuit")
    breaker_cooldown = params.Duration(default="2s", description="how long the circuit stays open")
    http2 = params.Bool(default=False, description="use HTTP/2 to the model server")
    allow_saved_model = params.Bool(
        default=False,
        description="accept TF_SAVED_MODEL descriptors (a SavedModel is a program: its graph "
        "is checked for file, Python and network ops, but only trusted publishers should push)",
    )
    max_artifact_bytes = params.Int(
        default=limits.Limits.artifact_bytes, min=1, description="largest artifact, in bytes"
    )
    max_unpacked_bytes = params.Int(
        default=limits.Limits.unpacked_bytes,
        min=1,
        description="most bytes an archive (SavedModel tar, Keras zip) may unpack to",
    )
    max_unpacked_files = params.Int(
        default=limits.Limits.unpacked_files, min=1, description="most files in an archive"
    )
    max_unpack_ratio = params.Int(
        default=limits.Limits.unpack_ratio,
        min=1,
        description="most an archive may unpack to, as a multiple of its own size "
        "(judged past 64 MiB unpacked; zeros gzip a thousandfold)",
    )
    download_timeout = params.Duration(
        default="10m", description="an artifact's whole download (timeout bounds each read)"
    )
    keep_versions = params.Int(
        default=3, min=1, description="artifacts kept in the cache (the most recently used)"
    )

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        # more than one worker: a superseded load may still be winding down
        self._swap: LiveSwap[ModelDescriptor, ActiveModel] = LiveSwap(
            lambda descriptor, cancelled: self._load(descriptor, cancelled),
            close=close_model,
            thread_name="model-load",
            workers=4,
        )
        self.tensors = tensors.TensorMapping({}, {})
        # a rollout's candidate beside the current model, where the subclass keeps one
        self.candidates = self.candidate_slot()

    def candidate_slot(self) -> CandidateSlot | None:
        """Where a subclass that serves rollouts keeps its candidate (see ``.candidate``);
        None, the default, ignores candidate descriptors: the model that serves is the
        stable one."""
        return None

    # -- lifecycle -----------------------------------------------------------

    def setup(self, context: Context) -> None:
        self.tensors = self.tensor_mapping()
        self._report_loaded(context, loaded=False)
        context.on_close(self._close_models)

    @classmethod
    def check_config(
        cls, config: Mapping[str, Any], *, schemas: Mapping[str, Mapping[str, Any]]
    ) -> list[ConfigProblem]:
        """The tensor mapping against the ports: fields that exist, with types that fit;
        and a warning per allowlist entry looser than it looks (any port, no path end)."""
        return checks.config_problems(
            config, lambda: cls(dict(config)).tensor_mapping(), cls.check_mapping, schemas
        )

    @classmethod
    def check_mapping(
        cls, mapping: tensors.TensorMapping, schemas: Mapping[str, Mapping[str, Any]]
    ) -> list[tensors.SchemaProblem]:
        """The mapping's inputs against the ``in`` port (subclasses add their outputs)."""
        return tensors.check_schemas(mapping, input_schema=schemas.get("in"), output_schema=None)

    def tensor_mapping(self) -> tensors.TensorMapping:
        """The declared mapping from this streamlet's config (MappingError says what is wrong)."""
        return tensors.TensorMapping.from_config(
            inputs=self.inputs, outputs=self.outputs, input_fields=self.input_fields
        )

    @property
    def current(self) -> ActiveModel | None:
        """The model in use, swapped in between batches."""
        return self._swap.current

    async def teardown(self) -> None:
        self._swap.shutdown()
        if self.candidates is not None:
            self.candidates.shutdown()

    async def _close_models(self) -> None:
        """At shutdown (``on_close``): the current model, and any retired one not yet closed."""
        await self._swap.close()
        if self.candidates is not None:
            await self.candidates.close()

    def accepts_data(self) -> bool:
        return self.current is not None or self.on_no_model == "dlq"

    def prepare(self, active: ActiveModel) -> Any:
        """On the worker thread, after loading: per-model state, kept as ``active.extra``.

        Raising fails the load (the old model stays). The default builds nothing.
        """
        return None

    # -- control ---------------------------------------------------------------

    def on_control(self, inlet: str, record: Record) -> Emit | list[Emit] | None:
        try:
            descriptor = ModelDescriptor.from_record(record.value)
        except ValueError as exc:  # a kind this version does not know
            value = record.value
            return self._status(value["name"], value["version"], ModelState.REJECTED, str(exc))
        if descriptor.rollout is not None:
            return self._on_candidate(descriptor)
        name, version = descriptor.name, descriptor.version
        newest = self._newest()
        if version <= newest:
            return self._status(
                name, version, ModelState.REJECTED, f"version {version} is not newer than {newest}"
            )
        refusal = admission.refusal(
            descriptor, allowlist=self.allowlist, allow_saved_model=self.allow_saved_model
        )
        if refusal:
            return self._status(name, version, ModelState.REJECTED, refusal)
        statuses = []
        promoted = self.candidates.promoted(descriptor) if self.candidates else None
        superseded = self._swap.cancel() if promoted else self._swap.submit(descriptor)
        if superseded is not None:  # a newer version wins: the old load stops
            statuses.append(
                self._status(
                    superseded.name,
                    superseded.version,
                    ModelState.SUPERSEDED,
                    f"superseded by version {version}",
                )
            )
        if promoted is not None:  # the candidate itself: it serves every record now
            self._swap.adopt(promoted)
            self._publish_model()
            self._report_loaded(self.context, loaded=True)
            message = f"promoted from candidate: {promoted.description}"
            statuses.append(self._status(name, version, ModelState.SERVING, message))
        else:
            statuses.append(self._status(name, version, ModelState.LOADING, descriptor.summary()))
        if self.candidates is not None:
            statuses += self._reports(self.candidates.stable_is(version))
        return statuses[0] if len(statuses) == 1 else statuses

    def _newest(self) -> int:
        """The newest stable version, loaded or loading (0: none yet)."""
        pending = self._swap.pending
        return max(self.current.version if self.current else 0, pending.version if pending else 0)

    def _on_candidate(self, descriptor: ModelDescriptor) -> Emit | list[Emit] | None:
        """A descriptor with a rollout: for the candidate slot, where there is one."""
        slot = self.candidates
        if slot is None:
            return None  # this streamlet follows the stable model only
        rollout = descriptor.rollout
        assert rollout is not None
        if rollout.mode is not RolloutMode.END:
            refusal = admission.refusal(
                descriptor, allowlist=self.allowlist, allow_saved_model=self.allow_saved_model
            )
            if refusal:
                return self._status(
                    descriptor.name, descriptor.version, ModelState.REJECTED, refusal, CANDIDATE
                )
        return self._reports(slot.offer(descriptor, self._newest())) or None

    def _reports(self, reports: list[Report]) -> list[Emit]:
        if reports:
            self._publish_model()
        return [self._status(*report, role=CANDIDATE) for report in reports]

    def _publish_model(self) -> None:
        """What ``streamflow status`` shows in its model column: the version serving, and
        a rollout's candidate with what it meets."""
        current = self.current
        if current is None:
            return
        said = current.tag
        plan = self.candidates.plan() if self.candidates is not None else None
        if plan is not None:
            rollout, candidate = plan
            said += f" + candidate {candidate.tag} ({rollout.describe()})"
        self.context.set_state("model", said)

    def between_batches(self) -> Emit | list[Emit] | None:
        statuses = []
        if self.candidates is not None and (report := self.candidates.poll()) is not None:
            statuses += self._reports([report])
        swapped = self._swap.poll()
        if swapped is not None:
            statuses.append(self._swapped(swapped.spec, swapped.loaded, swapped.error))
        return statuses[0] if len(statuses) == 1 else statuses or None

    def _swapped(
        self, descriptor: ModelDescriptor, loaded: ActiveModel | None, exc: Exception | None
    ) -> Emit:
        if loaded is None:
            serving = self.current.tag if self.current else "nothing"
            message = f"{type(exc).__name__}: {exc}; still serving {serving}"
            if isinstance(exc, tensors.MappingError) and exc.fix:  # the fix goes last
                message = (
                    f"{type(exc).__name__}: {exc.problem}; still serving {serving}. "
                    f"Fix, in the config of streamlet {self.context.streamlet}: {exc.fix}"
                )
            return self._status(descriptor.name, descriptor.version, ModelState.FAILED, message)
        self._publish_model()
        self._report_loaded(self.context, loaded=True)
        return self._status(loaded.name, loaded.version, ModelState.SERVING, loaded.description)

    @staticmethod
    def _report_loaded(context: Context, *, loaded: bool) -> None:
        # Until its first model is in, a replica holds its data (or dead-letters it,
        # on_no_model: dlq); an alert on this gauge staying 0 catches that stall.
        context.set_gauge(
            "model_loaded",
            1.0 if loaded else 0.0,
            description="1 once a model is loaded and in use, 0 until the first one is.",
        )

    async def close_retired(self) -> None:
        """Close the clients of replaced models; call it at the start of a batch.

        ``between_batches`` swaps models but is synchronous, so the old model's
        connections are closed here, on the event loop, once no batch uses it.
        """
        await self._swap.close_retired()
        if self.candidates is not None:
            await self.candidates.close_retired()

    def _load(
        self, descriptor: ModelDescriptor, cancelled: threading.Event | None = None
    ) -> ActiveModel:
        """On the worker thread: fetch, verify, load and warm up; raises on any failure.

        ``cancelled`` is set when a newer descriptor supersedes this one.
        """
        cancelled = cancelled or threading.Event()
        kind = descriptor.kind
        parameters = dict(descriptor.parameters)
        name, version = descriptor.name, descriptor.version
        started = time.perf_counter()
        predictor: Predictor
        if kind in REMOTE_KINDS:
            predictor = self._remote(descriptor, parameters)
            what = f"{kind} {descriptor.location}"
            mapping = self.tensors.bind(predictor.signature)
        elif kind not in EMBEDDED_KINDS:
            raise artifacts.ArtifactError(f"unknown model kind {kind!r}")
        else:
            cache = Path(self.cache_dir or Path.home() / ".cache" / "streamflow" / "models")
            bounds = self.artifact_limits()
            artifact = artifacts.fetch(
                data=descriptor.data,
                location=descriptor.location,
                sha256=descriptor.sha256,
                allowlist=self.allowlist,
                cache_dir=cache,
                limits=bounds,
                cancelled=cancelled,
            )
            if cancelled.is_set():
                raise artifacts.Superseded("superseded before loading")
            embedded = load_embedded(
                kind=kind,
                artifact=artifact,
                parameters=parameters,
                cache_dir=cache,
                limits=bounds,
                allow_saved_model=self.allow_saved_model,
            )
            try:  # housekeeping: a loaded model is not refused because a delete failed
                artifacts.evict(cache, keep=self.keep_versions)
            except OSError as exc:
                log.warning("could not evict old artifacts from %s: %s", cache, exc)
            mapping = self.tensors.bind(embedded.signature)
            for size in (1, 8):  # trace now, so the first real batch does not pay for it
                embedded.run(mapping.zeros(size))
            predictor = embedded
            what = f"{kind} ({embedded.description})"
        active = ActiveModel(name, version, kind, predictor, what, mapping)
        active.extra = self.prepare(active)
        took = time.perf_counter() - started
        log.info("loaded %s:%s, %s, in %.2fs", name, version, what, took)
        active.description = f"{what}, loaded in {took:.2f}s"
        return active

    def _remote(
        self, descriptor: ModelDescriptor, parameters: dict[str, str]
    ) -> remote.InferenceClient:
        location = descriptor.location
        if not location:
            raise artifacts.ArtifactError(f"a {descriptor.kind} descriptor needs a location")
        model = parameters.get("model", descriptor.name)
        if not artifacts.allowed(location, self.allowlist):  # checked again where it is used
            raise artifacts.Rejected(f"location {location!r} is not in the allowlist")
        timeout = self.timeout.total_seconds()
        protocol = descriptor.kind
        remote.check_ready(protocol=protocol, base_url=location, model=model, timeout=timeout)
        signature = remote.fetch_signature(
            protocol=protocol, base_url=location, model=model, timeout=timeout
        )
        return remote.InferenceClient(
            protocol=protocol,
            base_url=location,
            model=model,
            settings=self.client_settings(batch_size=parameters.get("batch_size")),
            input_name=parameters.get("input_name", "input"),
            signature=signature,
            binary=parameters.get("binary", "") in ("1", "true", "yes"),
            v1_columnar=parameters.get("v1_format", "") == "columnar",
        )

    def artifact_limits(self) -> limits.Limits:
        """What one artifact may cost, from this streamlet's parameters."""
        return limits.Limits(
            artifact_bytes=self.max_artifact_bytes,
            unpacked_bytes=self.max_unpacked_bytes,
            unpacked_files=self.max_unpacked_files,
            unpack_ratio=self.max_unpack_ratio,
            download_seconds=self.download_timeout.total_seconds(),
            read_seconds=self.timeout.total_seconds(),
        )

    def client_settings(self, *, batch_size: str | int | None = None) -> remote.ClientSettings:
        """The remote client's settings from this streamlet's parameters."""
        return remote.ClientSettings(
            batch_size=int(batch_size or self.remote_batch_size),
            concurrency=self.concurrency,
            timeout=self.timeout.total_seconds(),
            retries=self.retries,
            breaker_failures=self.breaker_failures,
            breaker_cooldown=self.breaker_cooldown.total_seconds(),
            http2=self.http2,
        )

    def _status(
        self, model: str, version: int, state: ModelState, message: str, role: str = STABLE
    ) -> Emit:
        replica = f"{self.context.streamlet}-{self.context.replica}"
        return self.status(
            status_record(
                model=model,
                version=version,
                state=state,
                message=message,
                replica=replica,
                log=log,
                role=role,
            )
        )


async def close_model(model: ActiveModel) -> None:
    """Release what a loaded model holds (a model server's connections)."""
    await model.predictor.aclose()
