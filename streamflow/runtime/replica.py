"""One replica of one streamlet, from an Application to a running loop.

This is the entry point shared by ``streamflow run``, the local supervisor and
a Kubernetes pod (``streamflow streamlet run``). Start-up order matters: the
streamlet's ``setup`` runs first, then control inlets are replayed to the end,
and only then does the replica join its consumer group, so no data record is
ever processed before the control state it depends on.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamflow.api.streamlet import Context, Logic, Streamlet
from streamflow.blueprint.model import Application
from streamflow.blueprint.plan import StreamletPlan
from streamflow.runtime import kafka_access, shutdown
from streamflow.runtime import state as state_mod
from streamflow.runtime.clients import KAFKA_LOGGER, KafkaClients
from streamflow.runtime.control import ControlInletBinding, ControlReader
from streamflow.runtime.delivery import AtLeastOnce, CountedOutputs, Delivery, FailedOutputs
from streamflow.runtime.health import (
    DEFAULT_STALL_AFTER_S,
    HealthServer,
    HealthState,
    LivenessWatch,
)
from streamflow.runtime.kafka_watch import SUMMARY_EVERY_S, KafkaWatch
from streamflow.runtime.metrics import Metrics
from streamflow.runtime.ports import Bindings, bind
from streamflow.runtime.processor import Processor
from streamflow.runtime.serve import ServeRunner
from streamflow.runtime.source import SourceRunner
from streamflow.runtime.transactions import ExactlyOnce
from streamflow.schema.registry import RegistryUnavailable
from streamflow.schema.store import SchemaStore

__all__ = ["ReplicaOptions", "install_signal_handlers", "run_replica"]

log = logging.getLogger("streamflow.runtime")
_ACCESS_TIMEOUT_S = 30.0
_REGISTRY_BACKOFF_S = (1.0, 30.0)  # first and longest wait for a schema registry at start


@dataclass
class ReplicaOptions:
    bootstrap: str
    replica: int = 0
    health_host: str = "127.0.0.1"
    health_port: int = 0
    batch_size: int = 500
    batch_timeout: float = 0.1
    stop: threading.Event = field(default_factory=threading.Event)
    kafka_config: dict[str, Any] = field(default_factory=dict)
    #: Where a stateful streamlet keeps its local stores (default: $STREAMFLOW_STATE_DIR,
    #: else ~/.local/state/streamflow), under <app>/<streamlet>/.
    state_dir: str | None = None
    #: How long a stopping replica waits for Kafka to take what it holds; it ends within
    #: this plus ``shutdown.CLOSE_MARGIN_S`` of SIGTERM, whatever Kafka does.
    flush_timeout_s: float = shutdown.FLUSH_TIMEOUT_S


def install_signal_handlers(
    stop: threading.Event, *, flush_timeout_s: float = shutdown.FLUSH_TIMEOUT_S
) -> None:
    """SIGTERM and SIGINT finish the current batch, commit and exit, within the bound."""
    shutdown.install_signal_handlers(stop, bound_s=shutdown.bound_s(flush_timeout_s))


def run_replica(app: Application, streamlet_name: str, options: ReplicaOptions) -> None:
    """Run one replica until ``options.stop`` is set. Raises on fatal errors."""
    plan = StreamletPlan.of(app, streamlet_name)
    descriptor, spec, config = plan.descriptor, plan.spec, dict(plan.config)
    stopping = shutdown.Stopping(options.stop, flush_timeout_s=options.flush_timeout_s)
    stopping.watch()
    store = SchemaStore(app.schema_paths)
    streamlet: Streamlet = descriptor.cls(config)
    context = Context(
        app=app.name,
        streamlet=streamlet_name,
        replica=options.replica,
        config=config,
        logger=logging.getLogger(f"streamflow.streamlet.{streamlet_name}"),
        schema_store=store,  # generic built-ins find their schemas here
    )
    streamlet.context = context
    metrics = Metrics(app=app.name, streamlet=streamlet_name, replica=options.replica)
    health = HealthState(stall_after=spec.stall_after or DEFAULT_STALL_AFTER_S)
    watch = LivenessWatch(health)  # this thread runs the loop
    watch.start()
    server = HealthServer(
        state=health, metrics=metrics, host=options.health_host, port=options.health_port
    )
    server.start()
    log.info(
        "health and metrics on http://%s:%d",
        options.health_host,
        server.port,
        extra={"health_port": server.port},
    )
    bindings = _bind(plan, store, health, options.stop)
    if bindings is None:  # stopped while the schema registry was away
        watch.stop()
        server.stop()
        stopping.last_line()
        return
    # Kafka going away is told once, then once a minute, not once per reconnect attempt
    kafka_watch = KafkaWatch(health=health, summary_every=_summary_every())
    logging.getLogger(KAFKA_LOGGER).addFilter(kafka_watch)
    clients = KafkaClients(
        bootstrap=options.bootstrap,
        config={**app.kafka.config, **options.kafka_config},
        watch=kafka_watch,
    )
    client_id = f"{plan.client_id_prefix}.{options.replica}"
    loop = asyncio.new_event_loop()
    try:
        # A wrong password or CA makes librdkafka retry forever: fail now, saying which.
        kafka_access.check_access(clients.config, timeout=_ACCESS_TIMEOUT_S)
        _maybe_await(loop, streamlet.setup(context))
        _tune_gc()
        if descriptor.inlets:
            _run_processor(
                plan,
                streamlet,
                bindings,
                clients,
                client_id,
                metrics,
                health,
                loop,
                options,
                stopping,
            )
        elif descriptor.logic == Logic.SERVE:
            producer = clients.producer(client_id=client_id)
            ServeRunner(
                streamlet=streamlet,
                descriptor=descriptor,
                bindings=bindings,
                producer=producer,
                metrics=metrics,
                health=health,
                loop=loop,
                stop=options.stop,
                stopping=stopping,
            ).run()
        else:
            _run_source(
                plan,
                streamlet,
                bindings,
                clients,
                client_id,
                metrics,
                health,
                loop,
                options,
                stopping,
            )
        try:
            _maybe_await(loop, streamlet.teardown())
        finally:  # what the streamlet registered with context.on_close, newest first
            loop.run_until_complete(context.aclose())
    finally:
        watch.stop()
        server.stop()
        loop.close()
        logging.getLogger(KAFKA_LOGGER).removeFilter(kafka_watch)
    stopping.last_line()  # "stopped cleanly", or what Kafka did not get


def _summary_every() -> float:
    """How often an outage of Kafka is summed up in the log (STREAMFLOW_OUTAGE_SUMMARY_EVERY)."""
    try:
        return max(1.0, float(os.environ.get("STREAMFLOW_OUTAGE_SUMMARY_EVERY", SUMMARY_EVERY_S)))
    except ValueError:
        return SUMMARY_EVERY_S


def _bind(
    plan: StreamletPlan,
    store: SchemaStore,
    health: HealthState,
    stop: threading.Event,
) -> Bindings | None:
    """The ports' bindings; while the schema registry cannot be reached, waits and says so.

    An outlet on a registry topic needs its schema id before its first record.
    A registry that is down at start is not a crash (a crash loop would hide
    why): the replica stays up, not ready, with the reason in its health, and
    retries with backoff. A registry that answers no (a schema that may not be
    registered) is a configuration error, and fails the start at once.
    """
    delay = _REGISTRY_BACKOFF_S[0]
    while True:
        try:
            return bind(plan, store)
        except RegistryUnavailable as exc:
            reason = f"waiting for the schema registry: {exc}"
            health.set_ready(False, [reason])
            health.doing(reason)  # before the loop's first turn: not judged, only shown
            log.warning("%s (again in %.0fs)", reason, delay)
            if stop.wait(delay):
                return None
            delay = min(delay * 2, _REGISTRY_BACKOFF_S[1])


def _delivery(
    plan: StreamletPlan,
    clients: KafkaClients,
    client_id: str,
    consumer: Any,
    metrics: Metrics | None = None,
    *,
    stopping: shutdown.Stopping,
    counted: bool = False,
) -> Delivery:
    """The streamlet's guarantee; ``counted``: at-least-once hears of every record Kafka
    acknowledged (a source's, which says what it delivered)."""
    if plan.exactly_once:
        # A failed output fails the transaction's commit, so successful deliveries need
        # no report: librdkafka then queues none, and poll() has none to serve.
        only_errors = {"delivery.report.only.error": True}
        producer = clients.producer(client_id=client_id, transactional_id=client_id, **only_errors)
        # the second, to take turns with (ExactlyOnce: no commit waits on the last one's end)
        spare = clients.producer(
            client_id=f"{client_id}.b", transactional_id=f"{client_id}.b", **only_errors
        )
        on_committed = metrics.committed_in_transaction if metrics is not None else None
        return ExactlyOnce(
            producer,
            consumer,
            spare=spare,
            on_committed=on_committed,
            transaction_timeout_s=clients.transaction_timeout_s,
            stopping=stopping,
            kafka_down=_down(clients.watch),
        )
    failures = CountedOutputs() if counted else FailedOutputs()
    producer = clients.producer(client_id=client_id, **failures.producer_config())
    return AtLeastOnce(producer, consumer, failures, stopping=stopping)


def _down(watch: KafkaWatch | None) -> Callable[[], bool]:
    """Whether the client has lost every broker, as ``watch`` heard it (never, unwatched)."""
    return (lambda: watch.down) if watch is not None else (lambda: False)


def _control_reader(
    bindings: Bindings, clients: KafkaClients, client_id: str
) -> ControlReader | None:
    if not bindings.controls_by_topic:
        return None
    reader = ControlReader.connect(
        clients=clients,
        bindings=[
            ControlInletBinding(inlet, topic, codec)
            for topic, (inlet, codec) in bindings.controls_by_topic.items()
        ],
        client_id=client_id,
    )
    reader.assign()
    return reader


def _run_processor(
    plan: StreamletPlan,
    streamlet: Streamlet,
    bindings: Bindings,
    clients: KafkaClients,
    client_id: str,
    metrics: Metrics,
    health: HealthState,
    loop: asyncio.AbstractEventLoop,
    options: ReplicaOptions,
    stopping: shutdown.Stopping,
) -> None:
    def on_stats(stats_json: str) -> None:
        health.backlog(metrics.on_stats(stats_json))  # the lag, for liveness: work waiting

    settings: dict[str, Any] = {"statistics.interval.ms": 5000, "stats_cb": on_stats}
    if plan.exactly_once:
        # Offsets travel inside each transaction; nothing may be committed beside it.
        settings["enable.auto.commit"] = False
    state = None
    if plan.descriptor.stateful:
        state = state_mod.connect(
            plan, bindings, clients, client_id=client_id, base=options.state_dir
        )
        streamlet.context.stores = state
    consumer = clients.consumer(group=plan.group, client_id=client_id, **settings)
    delivery = _delivery(plan, clients, client_id, consumer, metrics, stopping=stopping)
    stopping.pending = lambda: len(delivery.producer)  # what a stop past its bound leaves
    control = _control_reader(bindings, clients, client_id)
    processor = Processor(
        streamlet=streamlet,
        descriptor=plan.descriptor,
        bindings=bindings,
        consumer=consumer,
        delivery=delivery,
        metrics=metrics,
        health=health,
        control=control,
        loop=loop,
        stop=options.stop,
        batch_size=options.batch_size,
        batch_timeout=options.batch_timeout,
        state=state,
        lineage=plan.spec.lineage,
    )
    health.set_ready(False, ["replaying control inlets"] if control else ["joining the group"])
    try:
        if control is not None:
            control.catch_up(apply=processor.apply_control, reject=processor.reject_control)
        processor.run()
    finally:
        if (lost := delivery.close()) or delivery.stop_notes:
            stopping.tell(lost, *delivery.stop_notes, "the inputs are processed again")
        # revokes what it holds: the stores are checkpointed and closed
        closed = stopping.close("the consumer", consumer.close)
        if state is not None and closed:  # else its revoke may still run: the changelog has it
            state.close()
        if control is not None:
            stopping.close("the control reader", control.close)


def _run_source(
    plan: StreamletPlan,
    streamlet: Streamlet,
    bindings: Bindings,
    clients: KafkaClients,
    client_id: str,
    metrics: Metrics,
    health: HealthState,
    loop: asyncio.AbstractEventLoop,
    options: ReplicaOptions,
    stopping: shutdown.Stopping,
) -> None:
    delivery = _delivery(plan, clients, client_id, None, stopping=stopping, counted=True)
    runner = SourceRunner(
        streamlet=streamlet,
        descriptor=plan.descriptor,
        bindings=bindings,
        delivery=delivery,
        metrics=metrics,
        health=health,
        loop=loop,
        stop=options.stop,
    )
    try:
        runner.run()  # it tells, at its stop, what Kafka did not get
    finally:
        delivery.close()


def _tune_gc() -> None:
    """Keep the collector off the hot path.

    Start-up leaves tens of thousands of long-lived objects (the CLI, metrics,
    the streamlet's libraries); without freezing them, every full collection
    rescans them all, which cost about 2 µs per record in the passthrough
    benchmark. A higher first threshold makes young collections rarer too.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def _maybe_await(loop: asyncio.AbstractEventLoop, result: Any) -> None:
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)
