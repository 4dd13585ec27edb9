"""Autoscaling on this machine: the lag of each autoscaled streamlet, measured, then decided.

The policy itself is pure and shared with the Kubernetes operator
(:mod:`streamflow.operator.autoscale`); this module feeds it. One
:class:`AppAutoscaler` per application measures, every ``interval`` seconds,
the lag of each autoscaled streamlet's consumer group on its data inlets'
topics, asks the policy for a replica count, and keeps that count. The
supervisor reads the counts (:meth:`AppAutoscaler.counts`) and runs that many
replicas in place of the spec's ``replicas``, the way an HPA owns a
Deployment's replicas, so the user's spec file is never rewritten.

Why it is built so:

* Measuring asks Kafka, which may be slow or down, so it runs on a thread of
  its own and never under the supervisor's lock; the supervisor only reads
  the last counts, which never block.
* A measurement that fails keeps the count as it is and says why in the
  reason: scaling on no data would be a guess, and a broker outage is no
  reason to stop replicas that are waiting for it.
* The count starts from the spec's ``replicas`` (``min`` unless written) and
  survives a new spec (a roll, a redeploy); new bounds clamp it at once.
* Each change is kept in a short history (when, from, to, why) that goes into
  ``status.json``, so anyone can see what the autoscaler did during a burst.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from streamflow.blueprint.model import Application, AutoscaleSpec, StreamletSpec
from streamflow.operator import autoscale, targets
from streamflow.runtime import grouplag

__all__ = [
    "AppAutoscaler",
    "Change",
    "Measure",
    "default_interval",
    "kafka_measure",
    "recorded_status",
]

log = logging.getLogger("streamflow.operator.local")

INTERVAL_S = 5.0  # how often the lag is measured; an HPA looks every 15 s, KEDA every 30 s
INTERVAL_ENV = "STREAMFLOW_AUTOSCALE_INTERVAL"  # seconds, to measure more or less often
HISTORY = 20  # changes kept per streamlet in status.json

Measure = Callable[[str, list[str]], grouplag.GroupLag]  # (consumer group, topics) -> lag


def default_interval() -> float:
    """Seconds between measurements: ``$STREAMFLOW_AUTOSCALE_INTERVAL``, else 5."""
    try:
        value = float(os.environ.get(INTERVAL_ENV) or INTERVAL_S)
    except ValueError:
        return INTERVAL_S
    return value if value > 0 else INTERVAL_S


@dataclass(frozen=True)
class Change:
    """One change of a streamlet's replica count, as recorded."""

    streamlet: str
    at: float  # epoch seconds
    before: int
    after: int
    lag: int
    reason: str

    def describe(self) -> str:
        return f"autoscale: {self.streamlet} {self.before} → {self.after}: {self.reason}"


@dataclass
class _Streamlet:
    spec: AutoscaleSpec
    replicas: int
    group: str
    topics: list[str] | None = None  # learnt from the class on the first round
    history: autoscale.History = field(default_factory=autoscale.History)
    decision: autoscale.Decision | None = None
    reason: str = "waiting for the first measurement of the lag"
    decided_at: float | None = None  # epoch seconds of the last change
    decisions: int = 0  # changes of the count so far
    changes: deque[Change] = field(default_factory=lambda: deque(maxlen=HISTORY))


class AppAutoscaler:
    """The replica counts of one application's autoscaled streamlets, kept by the policy."""

    def __init__(
        self,
        app: Application,
        *,
        measure: Measure,
        interval: float | None = None,  # None: default_interval()
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval or default_interval()
        self._measure = measure
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._app = app
        self._streamlets: dict[str, _Streamlet] = {}
        self._pending: list[Change] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.update(app)

    # -- what the supervisor asks ----------------------------------------------------

    @property
    def active(self) -> bool:
        with self._lock:
            return bool(self._streamlets)

    def counts(self) -> dict[str, int]:
        """``{streamlet: replicas}`` for each autoscaled streamlet; never blocks on Kafka."""
        with self._lock:
            return {name: s.replicas for name, s in self._streamlets.items()}

    def applied_to(self, app: Application) -> Application:
        """``app`` with the autoscaler's counts in place of the spec's replicas."""
        for name, count in self.counts().items():
            if name in app.streamlets:
                app = app.with_replicas(name, count)
        return app

    def take_changes(self) -> list[Change]:
        """The changes since the last call, oldest first (for the event lines)."""
        with self._lock:
            changes, self._pending = self._pending, []
        return changes

    def status(self) -> dict[str, dict[str, Any]]:
        """Per autoscaled streamlet: the fields of ``targets.AutoscaleStatus``, and the history."""
        with self._lock:
            return {name: _status(s) for name, s in self._streamlets.items()}

    # -- changes of spec -------------------------------------------------------------

    def update(self, app: Application) -> None:
        """A new spec: new bounds clamp the counts now; a streamlet no longer autoscaled goes."""
        with self._lock:
            self._app = app
            kept: dict[str, _Streamlet] = {}
            for name, spec in app.streamlets.items():
                if spec.autoscale is None:
                    continue
                known = self._streamlets.get(name)
                if known is None:
                    count = min(max(spec.replicas, spec.autoscale.min), spec.autoscale.max)
                    kept[name] = _Streamlet(
                        spec=spec.autoscale, replicas=count, group=app.consumer_group(name)
                    )
                    continue
                if known.spec != spec.autoscale:  # new bounds or windows: start their memory anew
                    known.spec, known.history = spec.autoscale, autoscale.History()
                known.topics = None  # the topics may have changed with the spec
                low, high = spec.autoscale.min, spec.autoscale.max
                if not low <= known.replicas <= high:
                    clamped = min(max(known.replicas, low), high)
                    self._record(name, known, clamped, f"the bounds are now {low}..{high}")
                kept[name] = known
            self._streamlets = kept

    # -- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"autoscaler-{self._app.name}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop measuring, without waiting for a round under way.

        Such a round may take Kafka's timeouts; its result is simply never read.
        """
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.step()
            except Exception:  # a bug here must not end autoscaling for good
                log.exception("%s: autoscaling round failed", self._app.name)

    def step(self) -> None:
        """One round: measure each autoscaled streamlet, decide, keep the new counts."""
        with self._lock:
            app, names = self._app, list(self._streamlets)
        for name in names:
            self._step_one(app, name)

    def _step_one(self, app: Application, name: str) -> None:
        with self._lock:
            state = self._streamlets.get(name)
            topics = state.topics if state is not None else None
        if state is None:
            return
        try:
            if topics is None:
                topics = targets.data_inputs(app, name)  # may load the class: outside the lock
            measured = self._measure(state.group, topics)
        except Exception as exc:  # Kafka down, a topic missing: keep the count, say why
            message = str(exc) if isinstance(exc, grouplag.GroupLagError) else repr(exc)
            with self._lock:
                state.reason = f"cannot measure the lag, keeping {state.replicas}: {message}"
            return
        sample = autoscale.Sample(
            at=self._clock(),
            lag=measured.lag,
            produced=measured.produced,
            consumed=measured.consumed,
            partitions=_partitions(app, topics, measured),
        )
        with self._lock:
            if self._streamlets.get(name) is not state or self._app is not app:
                return  # no longer autoscaled, or a new spec came while measuring: its topics
            state.topics = topics
            decision, state.history = autoscale.decide(
                state.spec, sample, state.history, current=state.replicas
            )
            state.decision, state.reason = decision, decision.reason
            if decision.changed:
                self._record(name, state, decision.replicas, decision.reason)

    def _record(self, name: str, state: _Streamlet, count: int, reason: str) -> None:
        """Keep a change of count (under the lock)."""
        lag = state.decision.lag if state.decision is not None else 0
        change = Change(name, self._wall(), state.replicas, count, lag, reason)
        state.changes.append(change)
        state.replicas, state.reason, state.decided_at = count, reason, change.at
        state.decisions += 1
        self._pending.append(change)


def _status(state: _Streamlet) -> dict[str, Any]:
    decision = state.decision
    return {
        "min": state.spec.min,
        "max": state.spec.max,
        "target_lag": state.spec.target_lag,
        "replicas": state.replicas,
        "reason": state.reason,
        "decided_at": state.decided_at,
        "lag": decision.lag if decision is not None else None,
        "rate": decision.rate_in if decision is not None else None,
        "decisions": state.decisions,
        "history": [
            {k: v for k, v in asdict(c).items() if k != "streamlet"} for c in state.changes
        ],
    }


def recorded_status(
    streamlet: StreamletSpec, recorded: dict[str, Any] | None
) -> targets.AutoscaleStatus | None:
    """The autoscaler's status, as the supervisor recorded it for a streamlet of ``status.json``.

    None when the streamlet is not autoscaled; while the supervisor has not
    yet applied the spec's bounds, those bounds and the replicas running.
    """
    spec = streamlet.autoscale
    if spec is None:
        return None
    found = (recorded or {}).get("autoscale")
    if not isinstance(found, dict) or (found.get("min"), found.get("max")) != (spec.min, spec.max):
        running = streamlet.replicas if recorded is None else int(recorded.get("replicas", 0))
        return targets.AutoscaleStatus(  # the supervisor has not applied this spec yet
            min=spec.min,
            max=spec.max,
            target_lag=spec.target_lag,
            replicas=min(max(running, spec.min), spec.max),
            reason="waiting for the supervisor to apply the autoscaling",
        )
    fields = {f.name for f in dataclasses.fields(targets.AutoscaleStatus)}
    return targets.AutoscaleStatus(**{k: v for k, v in found.items() if k in fields})


def _partitions(app: Application, topics: list[str], measured: grouplag.GroupLag) -> int:
    """The most partitions among the inputs: what bounds the useful replicas.

    The broker's count is the truth for one topic (an external topic may have
    more than its spec says); over several, only the spec says which is widest.
    """
    if len(topics) == 1:
        return measured.partitions
    return max((app.topics[t].partitions for t in topics if t in app.topics), default=0)


def kafka_measure(admin: Any) -> Measure:
    """A :data:`Measure` that asks the broker behind ``admin`` (short timeouts)."""

    def measure(group: str, topics: list[str]) -> grouplag.GroupLag:
        return grouplag.measure(admin, group=group, topics=topics, timeout=5.0)

    return measure
