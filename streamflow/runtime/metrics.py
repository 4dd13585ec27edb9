"""Prometheus metrics of one replica.

Each replica owns a registry (not the global one), so several runtimes in one
test process do not collide. Counters are incremented once per batch with the
batch's count, never once per record: the hot path stays cheap.

Metrics of a streamlet's own (``context.set_gauge`` and ``context.count``,
see :mod:`streamflow.api.own_metrics`) are registered here the first time the
streamlet reports them, in the same registry and with the same labels.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streamflow.api import own_metrics
from streamflow.runtime.writer_schemas import WriterSchemaDeadLetters

__all__ = ["Metrics"]

log = logging.getLogger("streamflow.runtime")

_BATCH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self, *, app: str, streamlet: str, replica: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._transaction_offsets: dict[tuple[str, int], int] = {}
        # The partitions this replica owns (None: not told yet, all of them count).
        # librdkafka keeps reporting a revoked partition with the offsets it had then.
        self._owned: set[tuple[str, int]] | None = None
        self.labels = {"app": app, "streamlet": streamlet, "replica": str(replica)}
        names = ["app", "streamlet", "replica"]
        self.records_in = Counter(
            "streamflow_records_in",
            "Records consumed, per inlet.",
            [*names, "port"],
            registry=self.registry,
        )
        self.records_out = Counter(
            "streamflow_records_out",
            "Records produced, per outlet.",
            [*names, "port"],
            registry=self.registry,
        )
        # an ingress's truth: what Kafka acknowledged (records_out counts what was produced)
        self.records_delivered = Counter(
            "streamflow_records_delivered",
            "Records an ingress wrote that Kafka acknowledged (or committed, exactly-once).",
            names,
            registry=self.registry,
        )
        self.records_queued = Gauge(
            "streamflow_records_queued",
            "Records an ingress wrote that Kafka has not acknowledged yet.",
            names,
            registry=self.registry,
        )
        self.records_dlq = Counter(
            "streamflow_records_dlq",
            "Records sent to the dead-letter topic, per inlet.",
            [*names, "port"],
            registry=self.registry,
        )
        # of those, the ones a writer schema the port cannot read caused, by schema
        self.writer_schemas = WriterSchemaDeadLetters(self.registry, self.labels)
        self.errors = Counter(
            "streamflow_errors",
            "Errors, per port and kind (decode, logic, encode, delivery).",
            [*names, "port", "kind"],
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "streamflow_batch_seconds",
            "Time to process one batch, consume to produce.",
            names,
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "streamflow_batch_records",
            "Records per batch.",
            names,
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000),
            registry=self.registry,
        )
        self.lag = Gauge(
            "streamflow_consumer_lag",
            "Records behind the end of each assigned partition.",
            [*names, "topic", "partition"],
            registry=self.registry,
        )
        self.control_state = Gauge(
            "streamflow_control_state",
            "Current control state (value 1 marks the current one).",
            [*names, "name", "value"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "streamflow_records_skipped",
            "Records deliberately skipped (sampling, shedding).",
            [*names, "reason"],
            registry=self.registry,
        )
        self._state: dict[str, str] = {}
        self._own: dict[str, Gauge | Counter | None] = {}  # None: refused, reported once

    def port(self, counter: Counter, port: str, **extra: str) -> Any:
        return counter.labels(**self.labels, port=port, **extra)

    def set_state(self, state: Mapping[str, str]) -> None:
        for name, value in state.items():
            previous = self._state.get(name)
            if previous == value:
                continue
            if previous is not None:
                self.control_state.remove(*self.labels.values(), name, previous)
            self.control_state.labels(**self.labels, name=name, value=value).set(1)
            self._state[name] = value

    def export_own(self, reported: Mapping[str, own_metrics.OwnMetric]) -> None:
        """Export what the streamlet reported with ``set_gauge`` and ``count`` since last time.

        ``reported`` is the streamlet's ``context.metrics``; exported values are
        cleared from it, the metrics' kinds and labels stay.
        """
        for name, metric in reported.items():
            if not metric.values:
                continue
            family = self._own[name] if name in self._own else self._register(name, metric)
            for label_values, value in metric.values.items():
                if isinstance(family, Gauge):
                    family.labels(*self.labels.values(), *label_values).set(value)
                elif isinstance(family, Counter):
                    family.labels(*self.labels.values(), *label_values).inc(value)
            metric.values.clear()

    def _register(self, name: str, metric: own_metrics.OwnMetric) -> Gauge | Counter | None:
        kind = Gauge if metric.kind == "gauge" else Counter
        label_names = [*self.labels, *metric.label_names]
        try:
            family: Gauge | Counter | None = kind(
                f"streamflow_{name}", metric.description, label_names, registry=self.registry
            )
        except ValueError as exc:  # a name the runtime's own metrics already use
            log.error("the streamlet's metric %r is not exported: %s", name, exc)
            family = None
        self._own[name] = family
        return family

    def own_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions assigned to this replica: their lag is reported from now on."""
        if self._owned is None:
            self._owned = set()
        self._owned.update(partitions)

    def forget_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Drop the lag of partitions this replica no longer owns, so sums stay true."""
        for topic, partition in partitions:
            if self._owned is not None:
                self._owned.discard((topic, partition))
            self._transaction_offsets.pop((topic, partition), None)
            with contextlib.suppress(KeyError):
                self.lag.remove(*self.labels.values(), topic, str(partition))

    def committed_in_transaction(self, offsets: dict[tuple[str, int], int]) -> None:
        """Offsets an exactly-once replica committed inside a transaction.

        The consumer never commits them itself, so librdkafka's own view of what
        is committed (and the ``consumer_lag`` it derives) stays where it was at
        assignment: 30,000 behind while the group was in fact caught up.
        """
        self._transaction_offsets.update(offsets)

    def on_stats(self, stats_json: str) -> int:
        """librdkafka's statistics callback: per-partition consumer lag.

        The lag is the end of the partition a ``read_committed`` reader sees (the
        last stable offset) less the group's committed offset, whether the consumer
        committed it or a transaction did. Returns the records waiting for this
        replica's loop, or 0 when no broker is up (then nothing can be taken, and the
        lag is stale).

        What waits is counted from the consumer's position, not from the committed
        offset: behind a transactional producer the last offset of a partition is a
        commit marker that no consumer is ever handed, so a caught-up group stays
        committed one short of the end. Counted from there, a quiet topic looked like
        a record waiting and the liveness check restarted an idle replica.
        """
        stats = json.loads(stats_json)
        waiting = 0
        owned = self._owned
        for topic, tstats in stats.get("topics", {}).items():
            for partition, pstats in tstats.get("partitions", {}).items():
                if partition == "-1":
                    continue
                if owned is not None and (topic, int(partition)) not in owned:
                    # revoked (its offsets frozen as they were then) or never ours: its
                    # lag is its owner's, and counted here it made an idle replica look
                    # stuck to the liveness check and the lag stay in `status`
                    continue
                lag = pstats.get("consumer_lag", -1)
                in_transaction = self._transaction_offsets.get((topic, int(partition)), -1)
                committed = max(pstats.get("committed_offset", -1), in_transaction)
                end = pstats.get("ls_offset", -1)
                if end < 0:
                    end = pstats.get("hi_offset", -1)
                if committed >= 0 and end >= 0:
                    lag = max(end - committed, 0)
                if lag >= 0:
                    self.lag.labels(**self.labels, topic=topic, partition=partition).set(lag)
                    position = pstats.get("app_offset", -1)
                    waiting += max(end - position, 0) if position >= 0 and end >= 0 else lag
        brokers = [b for b in stats.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        return waiting if any(b.get("state") == "UP" for b in brokers) else 0
