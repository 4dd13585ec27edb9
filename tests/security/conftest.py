"""The secured Kafka of the security suite: one broker per session, SASL_SSL, mTLS and ACLs.

`secured_kafka` is a `devkit.SecuredKafkaBroker` with the users `admin` (super
user), `streamflow` (what the example applications run as: every right on
topics, groups and transactional ids, granted here by ACLs) and `serving`
(nothing until a test grants it something). Tests make unique topic names, so
they share the broker without stepping on each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from streamflow import devkit


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[devkit.SecuredKafkaBroker]:
    broker = devkit.SecuredKafkaBroker(users=("streamflow", "serving"))
    try:
        broker.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    grant(broker, "streamflow", ResourceType.TOPIC, "*", AclOperation.ALL)
    grant(broker, "streamflow", ResourceType.GROUP, "*", AclOperation.ALL)
    grant(broker, "streamflow", ResourceType.TRANSACTIONAL_ID, "*", AclOperation.ALL)
    grant(broker, "streamflow", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    yield broker
    broker.stop()


def grant(
    broker: devkit.SecuredKafkaBroker,
    user: str,
    resource: ResourceType,
    name: str,
    *operations: AclOperation,
    prefixed: bool = False,
) -> None:
    """ALLOW `user` each operation on a resource, and wait until the broker applies it."""
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    bindings = [
        AclBinding(resource, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]
    admin = AdminClient(broker.admin_config())
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(timeout=30)


@pytest.fixture
def secured_topic(secured_kafka: devkit.SecuredKafkaBroker) -> Callable[..., str]:
    """`secured_topic(prefix, partitions=1, config=None)`: a unique topic, made by the admin."""

    def create(
        prefix: str = "secured", *, partitions: int = 1, config: dict[str, str] | None = None
    ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient(secured_kafka.admin_config())
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=30)
        return name

    return create
