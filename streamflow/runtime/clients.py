"""The seam between the runtime and Kafka: one factory for every client.

Every consumer, producer and admin client the runtime creates goes through a
:class:`KafkaClients`. It holds the application's client config (bootstrap
servers, security settings from a Secret) and the per-role defaults that the
delivery guarantees depend on, so those settings live in one place.

The CLI's clients (``tail``, ``model push``/``status``, topic creation) come
from the same place, :meth:`KafkaClients.for_application`: the blueprint's
``kafka.config`` under the ``STREAMFLOW_KAFKA_*`` environment, exactly what a
replica uses. A command that built its own client from ``bootstrap.servers``
alone would speak plaintext to a broker the application reaches over TLS.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streamflow.blueprint import kafka_keys
from streamflow.blueprint.model import Application

if TYPE_CHECKING:
    from streamflow.runtime.kafka_watch import KafkaWatch

__all__ = [
    "ENV_PREFIX",
    "KafkaClients",
    "application_config",
    "config_from_env",
    "retry_transient",
    "watermarks",
]

ENV_PREFIX = kafka_keys.ENV_PREFIX

# A fenced or crashed transaction blocks its partitions until it times out (Kafka's
# default is a minute); an app may set its own (``STREAMFLOW_KAFKA_TRANSACTION_TIMEOUT_MS``).
TRANSACTION_TIMEOUT_MS = 10_000

# Settings that make the at-least-once and exactly-once guarantees hold.
_PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 65_536,
}
_CONSUMER_DEFAULTS: dict[str, Any] = {
    # Offsets are stored by the runtime only once every output of a record is
    # acknowledged; librdkafka then commits what was stored.
    "enable.auto.commit": True,
    "enable.auto.offset.store": False,
    "auto.commit.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "partition.assignment.strategy": "cooperative-sticky",
    "fetch.wait.max.ms": 50,
    # Fail over within seconds when a replica dies, rather than the 45 s default.
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 2_000,
    "queued.max.messages.kbytes": 32_768,
    # When that prefetch queue is full librdkafka pauses fetching for this long
    # (1 s by default), which starved 1 KB records; 100 ms keeps it fed.
    "fetch.queue.backoff.ms": 100,
}


# Variables under the prefix that are not librdkafka settings: Kafka's address, and
# where the devkit finds Kafka's jars (a broker on a laptop, not a client setting).
_NOT_CLIENT_SETTINGS = frozenset((ENV_PREFIX + "BOOTSTRAP", ENV_PREFIX + "LIB"))


def config_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Kafka client settings from ``STREAMFLOW_KAFKA_*`` variables.

    This is how credentials reach a pod: the operator mounts the application's
    Secret with that prefix (``STREAMFLOW_KAFKA_SASL_PASSWORD`` becomes
    ``sasl.password``), so they never appear in a spec or a ConfigMap.
    ``STREAMFLOW_KAFKA_BOOTSTRAP`` is the bootstrap servers, read separately, and
    ``STREAMFLOW_KAFKA_LIB`` the devkit's Kafka jars;
    ``STREAMFLOW_KAFKA_SCHEMA_REGISTRY_*`` (the same Secret's registry
    credentials) are the registry client's, not librdkafka's.
    """
    return {
        name[len(ENV_PREFIX) :].lower().replace("_", "."): value
        for name, value in environ.items()
        if name.startswith(ENV_PREFIX)
        and name not in _NOT_CLIENT_SETTINGS
        and not name.startswith(ENV_PREFIX + "SCHEMA_REGISTRY_")
        and value
    }


def application_config(app: Application, environ: Mapping[str, str]) -> dict[str, str]:
    """What every client of ``app`` is configured with: ``kafka.config``, then the environment.

    The environment wins, since that is where credentials and per-machine
    settings (a CA file's path) arrive; the blueprint holds none of those.
    """
    return {**app.kafka.config, **config_from_env(environ)}


class KafkaClients:
    """Creates Kafka clients for one application and process."""

    @classmethod
    def for_application(
        cls,
        app: Application,
        *,
        bootstrap: str,
        environ: Mapping[str, str],
        **extra: Any,
    ) -> KafkaClients:
        """The clients a replica of ``app`` would make; ``extra`` adds settings (``log_level``)."""
        return cls(bootstrap=bootstrap, config={**application_config(app, environ), **extra})

    def __init__(
        self,
        *,
        bootstrap: str,
        config: Mapping[str, Any] | None = None,
        watch: KafkaWatch | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            # librdkafka's own log lines join the structured log instead of raw stderr
            "logger": logging.getLogger(KAFKA_LOGGER),
            **(config or {}),
        }
        # told by each client's statistics when a broker is up again (a replica's)
        self.watch = watch

    def consumer(self, *, group: str, client_id: str, **overrides: Any) -> Consumer:
        return Consumer(
            self._watched(
                {**self.config, **_CONSUMER_DEFAULTS, "group.id": group, "client.id": client_id}
                | overrides
            )
        )

    def reader(self, *, client_id: str, **overrides: Any) -> Consumer:
        """A consumer that only looks: partitions assigned by hand, nothing committed."""
        return Consumer(
            self._watched(
                {
                    **self.config,
                    "group.id": f"{client_id}-{uuid.uuid4().hex[:8]}",
                    "client.id": client_id,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
                | overrides
            )
        )

    def _watched(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with statistics that tell the watch when Kafka is back (chaining any
        ``stats_cb`` of the caller's)."""
        if self.watch is None:
            return config
        config["stats_cb"] = self.watch.stats_cb(config.get("stats_cb"))
        config.setdefault("statistics.interval.ms", _WATCH_STATS_MS)
        return config

    def producer(
        self, *, client_id: str, transactional_id: str | None = None, **overrides: Any
    ) -> Producer:
        config = self._watched(
            {**self.config, **_PRODUCER_DEFAULTS, "client.id": client_id} | overrides
        )
        if transactional_id:
            config["transactional.id"] = transactional_id
            # A fenced or crashed transaction blocks its partitions until it times out.
            config.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        return Producer(config)

    @property
    def transaction_timeout_s(self) -> float:
        """A transactional producer's ``transaction.timeout.ms`` (the app's, or ours), in s."""
        return int(self.config.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)) / 1000

    def admin(self) -> AdminClient:
        return AdminClient({k: v for k, v in self.config.items() if k != "logger"})


KAFKA_LOGGER = "streamflow.kafka"  # where librdkafka's lines arrive (and the watch sits)
_WATCH_STATS_MS = 5000  # how soon a watched client tells that a broker is up again


_T = TypeVar("_T")
# What a topic made moments ago (or one whose leader moved with a broker restart) answers
# until the client's metadata settles; librdkafka does not mark all of them retriable.
_TRANSIENT = frozenset(
    (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    )
)


def retry_transient(call: Callable[[], _T], *, timeout_s: float = 30.0, pause_s: float = 0.2) -> _T:
    """``call()``, asked again while Kafka's answer is transient, for up to ``timeout_s``.

    Any other error, or a transient one past the deadline, is raised as it came.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _TRANSIENT
            if not transient or time.monotonic() > deadline:
                raise
        time.sleep(pause_s)


def watermarks(
    consumer: Consumer, partition: TopicPartition, *, timeout_s: float = 10.0
) -> tuple[int, int]:
    """Where ``partition`` begins and ends: ``get_watermark_offsets``, asked again while
    the answer is transient (a topic just made says "not leader for partition" at first)."""
    return retry_transient(
        lambda: consumer.get_watermark_offsets(partition, timeout=timeout_s), timeout_s=timeout_s
    )
