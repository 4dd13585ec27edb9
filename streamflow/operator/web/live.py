"""Keeping one application's snapshot fresh: a watcher thread per application being viewed.

Every open page of an application shares one :class:`Watcher`, so ten tabs
cost the replicas and Kafka what one does. The watcher polls on its own
thread (the target's status, the replicas' ``/metrics``) and publishes a new
snapshot with a sequence number; the server's event streams wait for the next
number on the event loop (:meth:`Watcher.wait`), woken from the thread, so an
open page holds no thread of the server's pool. Rates are taken over a few
seconds of readings rather than between two consecutive polls: a source that
writes 25 records/s in batches would otherwise show 0, 50, 0, 50. A watcher
nobody has asked for in a while stops, and the :class:`Hub` starts a new one
on the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from streamflow.api import descriptor as descriptors
from streamflow.blueprint import graph as graphs
from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.web import scrape, snapshot, topics
from streamflow.schema import SchemaStore

__all__ = ["Hub", "Watcher", "graph_of"]

log = logging.getLogger("streamflow.web")

_IDLE_STOP_S = 60.0
_APP_REFRESH_S = 15.0


def graph_of(app: Application, *, import_code: bool = True) -> graphs.Graph:
    """The blueprint's graph; without schemas when the streamlets' classes are not imported.

    ``import_code=False`` never imports them: the operator's web view runs in the
    operator's process, which must never run an application's code (it holds
    the rights to every application's Secret). The graph then says what the spec
    alone says, as it does when the classes cannot be imported: who writes and
    reads each topic.
    """
    if import_code:
        try:
            return graphs.build_graph(app)
        except (descriptors.ClassLoadError, descriptors.DeclarationError, ImportError):
            pass
    nodes = tuple(
        graphs.StreamletNode(name, spec.class_path, "?", spec.replicas)
        for name, spec in app.streamlets.items()
    )
    topic_nodes = tuple(
        graphs.TopicNode(t.name, t.partitions, t.replication, t.managed, t.compacted)
        for t in app.topics.values()
    )
    edges = tuple(
        graphs.Edge(ref.streamlet, ref.port, t.name, "?", direction)
        for t in app.topics.values()
        for refs, direction in ((t.producers, "produce"), (t.consumers, "consume"))
        for ref in refs
    )
    return graphs.Graph(app.name, nodes, topic_nodes, edges)


class Watcher:
    """Polls one application every ``interval`` seconds until stopped or idle."""

    def __init__(
        self,
        *,
        target: targets.Target,
        app: Application,
        interval: float = 1.0,
        window: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        import_code: bool = True,
    ) -> None:
        self.target = target
        self.name = app.name
        self.interval = interval
        self.import_code = import_code
        self.window = window
        self._clock, self._wall = clock, wall
        self._set_app(app)
        self._readings: deque[snapshot.Reading] = deque()
        self._snapshot: dict[str, Any] | None = None
        self._seq = 0
        self._changed = threading.Condition()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._stop = threading.Event()
        self._used = clock()
        self._reader: topics.TopicReader | None = None
        self._reader_problem: str | None = None  # why there is no reader (Kafka refused)
        self._reader_tried = float("-inf")
        self._thread = threading.Thread(target=self._run, name=f"web-{app.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.stop()
        with self._changed:
            self._changed.notify_all()
            self._wake()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def touch(self) -> None:
        self._used = self._clock()

    def latest(self, *, after: int = 0, timeout: float = 10.0) -> tuple[int, dict[str, Any] | None]:
        """``(seq, snapshot)`` once one newer than ``after`` exists, or the current at timeout."""
        self.touch()
        with self._changed:
            self._changed.wait_for(lambda: self._seq > after or self._stop.is_set(), timeout)
            return self._seq, self._snapshot

    async def wait(self, *, after: int = 0, timeout: float) -> tuple[int, dict[str, Any] | None]:
        """:meth:`latest` for the event loop: waits there, not in a thread of the pool."""
        self.touch()
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._changed:
            if self._seq > after or self._stop.is_set():
                return self._seq, self._snapshot
            self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter[1].wait(), timeout)
        finally:
            with self._changed:
                self._waiters.discard(waiter)
        with self._changed:
            return self._seq, self._snapshot

    def _wake(self) -> None:
        """Wake every :meth:`wait` (called with ``_changed`` held, from any thread)."""
        for loop, event in self._waiters:
            with contextlib.suppress(RuntimeError):  # a loop that closed meanwhile
                loop.call_soon_threadsafe(event.set)

    # -- the thread ------------------------------------------------------------

    def _set_app(self, app: Application) -> None:
        self.app = app
        self.graph = graph_of(app, import_code=self.import_code)
        self.formats = {name: str(getattr(t, "format", "avro")) for name, t in app.topics.items()}
        self.dlq_topics = {s: app.dlq_topic(s) for s in app.streamlets}
        self._app_at = self._clock()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._clock() - self._used > _IDLE_STOP_S:
                    break
                try:
                    self._poll()
                except Exception as exc:  # a bug here must not freeze every open page
                    log.exception("the web view could not build a snapshot of %s", self.name)
                    self._publish({"app": self.name, "error": f"internal error: {exc!r}"})
                self._stop.wait(self.interval)
        finally:
            self.stop()

    def _poll(self) -> None:
        try:
            if self._clock() - self._app_at > _APP_REFRESH_S:
                self._set_app(self.target.application(self.name))
            status = self.target.status(self.name)
        except targets.TargetError as exc:
            self._publish({"app": self.name, "error": exc.message, "hint": exc.hint})
            return
        self._ensure_reader(status)
        endpoints = {
            r.name: r.endpoint for s in status.streamlets for r in s.replicas if r.endpoint
        }
        reading = snapshot.Reading(at=self._clock(), replicas=scrape.scrape_all(endpoints))
        older = self._older(reading)
        records = (
            self._reader.records()
            if self._reader is not None
            else snapshot.Records(problem=self._reader_problem)
        )
        self._publish(
            snapshot.build(
                graph=self.graph,
                status=status,
                newer=reading,
                older=older,
                records=records,
                formats=self.formats,
                dlq_topics=self.dlq_topics,
                now=self._wall(),
            )
        )

    def _older(self, reading: snapshot.Reading) -> snapshot.Reading | None:
        """The oldest reading within the window (kept), for rates over a few seconds."""
        self._readings.append(reading)
        while len(self._readings) > 2 and reading.at - self._readings[1].at >= self.window:
            self._readings.popleft()
        oldest = self._readings[0]
        return oldest if oldest is not reading else None

    def _ensure_reader(self, status: targets.AppStatus) -> None:
        wanted = topics.report_topics(self.graph)
        if self._reader is not None or not wanted:
            return
        if self._clock() - self._reader_tried < _APP_REFRESH_S:
            return  # the target refused a moment ago: not asked again on every poll
        try:  # the target's own settings: in a cluster, the Secret its admission allows
            config = self.target.kafka_client_config(self.name)
        except targets.TargetError as exc:
            self._reader_tried = self._clock()
            hint = f" ({exc.hint})" if exc.hint else ""
            self._reader_problem = f"cannot read the report topics: {exc.message}{hint}"
            return
        bootstrap = config.get("bootstrap.servers") or self.app.kafka.bootstrap or status.kafka
        if not bootstrap:
            return
        self._reader_problem = None
        self._reader = topics.TopicReader(
            bootstrap=str(bootstrap),
            config=config,
            topics=wanted,
            store=SchemaStore(self.app.schema_paths),
            app=self.app,
        )
        self._reader.start()

    def _publish(self, data: dict[str, Any]) -> None:
        with self._changed:
            self._snapshot = data
            self._seq += 1
            self._changed.notify_all()
            self._wake()


class Hub:
    """The watchers of the applications being viewed, started on demand."""

    def __init__(
        self, target: targets.Target, *, interval: float = 1.0, import_code: bool = True
    ) -> None:
        self.target = target
        self.interval = interval
        self.import_code = import_code
        self._watchers: dict[str, Watcher] = {}
        self._lock = threading.Lock()

    def watcher(self, name: str) -> Watcher:
        """The application's watcher, started if needed; TargetError for an unknown app."""
        with self._lock:
            found = self._watchers.get(name)
            if found is not None and found.alive:
                found.touch()
                return found
        app = self.target.application(name)  # outside the lock: it may be slow
        with self._lock:
            found = self._watchers.get(name)
            if found is None or not found.alive:
                found = Watcher(
                    target=self.target,
                    app=app,
                    interval=self.interval,
                    import_code=self.import_code,
                )
                found.start()
                self._watchers[name] = found
            return found

    def stop(self) -> None:
        with self._lock:
            for watcher in self._watchers.values():
                watcher.stop()
            self._watchers.clear()
