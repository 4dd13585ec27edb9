"""Prometheus metrics of one replica.

Each replica owns a registry (not the global one), so several runtimes in one
test process do not collide. Counters are incremented once per batch with the
batch's count, never once per record: the hot path stays cheap.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_BATCH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self, *, app: str, streamlet: str, replica: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
        self.records_dlq = Counter(
            "streamflow_records_dlq",
            "Records sent to the dead-letter topic, per inlet.",
            [*names, "port"],
            registry=self.registry,
        )
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

    def forget_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Drop the lag of partitions this replica no longer owns, so sums stay true."""
        for topic, partition in partitions:
            with contextlib.suppress(KeyError):
                self.lag.remove(*self.labels.values(), topic, str(partition))

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's statistics callback: per-partition consumer lag."""
        stats = json.loads(stats_json)
        for topic, tstats in stats.get("topics", {}).items():
            for partition, pstats in tstats.get("partitions", {}).items():
                lag = pstats.get("consumer_lag", -1)
                if partition != "-1" and lag >= 0:
                    self.lag.labels(**self.labels, topic=topic, partition=partition).set(lag)
