"""Shared fixtures: one Kafka per test session, and unique topics per test.

The broker comes from `$STREAMFLOW_KAFKA_BOOTSTRAP` when set, else the embedded
devkit broker (the jars from `tools/fetch-kafka`), else a testcontainers Kafka
where Docker answers. `kafka_broker` is a separate embedded broker, started
only for the tests that stop and restart it, so they never disturb the rest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient

from streamflow import devkit
from tests import tiers, timing

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

pytest_plugins = [
    "tests.builds",
    "tests.chaos.gather",
    "tests.tiers",
    "tests.model_fixtures",
    "tests.k8s_fixtures",
    "tests.image_fixtures",
    "tests.toxiproxy_fixtures",
]

BOOTSTRAP_ENV = "STREAMFLOW_KAFKA_BOOTSTRAP"
SCHEMA_REGISTRY_ENV = "STREAMFLOW_SCHEMA_REGISTRY_URL"
ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    tiers.register(config)
    timing.register(config)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the tiers set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.apply(items, ROOT)


@pytest.fixture(scope="session", autouse=True)
def _worker_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A `$STREAMFLOW_HOME` of each worker's own, so no test reads or writes a user's."""
    home = tmp_path_factory.mktemp("streamflow-home")
    home.chmod(0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STREAMFLOW_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The bootstrap servers of the session's shared Kafka."""
    if external := os.environ.get(BOOTSTRAP_ENV):
        yield external
        return
    broker = devkit.KafkaBroker()
    try:
        broker.start()
    except devkit.DevkitError as error:
        if not _docker_answers():
            pytest.fail(str(error), pytrace=False)
        with _container_kafka() as bootstrap:
            yield bootstrap
        return
    yield broker.bootstrap_servers
    broker.stop()


@pytest.fixture(scope="session")
def schema_registry_url() -> Iterator[str]:
    """The URL of the session's schema registry (Confluent API), for `SchemaRegistryClient`.

    `$STREAMFLOW_SCHEMA_REGISTRY_URL` when set, else the devkit's Apicurio (tools/registry/build).
    """
    if external := os.environ.get(SCHEMA_REGISTRY_ENV):
        yield external
        return
    registry = devkit.SchemaRegistry()
    try:
        registry.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    yield registry.url
    registry.stop()


@pytest.fixture
def schema_registry_client(schema_registry_url: str) -> Iterator[SchemaRegistryClient]:
    """confluent-kafka's client of the session's registry (it caches what it registered)."""
    # imported here: the registry extra is optional for the rest of the suite
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry_url})
    yield client
    client.__exit__()


@pytest.fixture(scope="session")
def _restartable_broker() -> Iterator[devkit.KafkaBroker]:
    broker = devkit.KafkaBroker()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_broker(_restartable_broker: devkit.KafkaBroker) -> devkit.KafkaBroker:
    """An embedded broker of its own that a test may kill, pause or restart; running at start."""
    if _restartable_broker.is_running:
        _restartable_broker.resume()  # a failed test may have left it paused
        return _restartable_broker
    try:
        _restartable_broker.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    return _restartable_broker


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """`topic_factory(prefix, partitions=1, config=None)` makes a unique, ready topic.

    The topics are deleted after the test.
    """
    created: list[str] = []

    def create(
        prefix: str = "test", *, partitions: int = 1, config: dict[str, str] | None = None
    ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        devkit.create_topic(
            bootstrap_servers=kafka_bootstrap, name=name, partitions=partitions, config=config
        )
        created.append(name)
        return name

    yield create
    if created:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result(timeout=30)


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@contextlib.contextmanager
def _container_kafka() -> Iterator[str]:
    try:
        from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail(
            "No Kafka: the jars are missing (run tools/fetch-kafka) and testcontainers "
            "is not installed for the Docker fallback.",
            pytrace=False,
        )
    with KafkaContainer().with_kraft() as container:
        yield str(container.get_bootstrap_server())
