"""Creating and checking an application's topics with the Kafka AdminClient.

Managed topics are created with the partitions, replication and config of the
blueprint. A topic that already exists is never altered or deleted: a
difference in partition count or cleanup policy is reported instead, since
changing either silently would reorder keys or lose data. External topics
(``managed: false``) must already exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # stubs omit the re-exports
    AdminClient,
    ConfigResource,
    NewTopic,
)

from streamflow.blueprint.model import Application, TopicSpec

__all__ = ["TopicReport", "TopicsError", "all_topics", "ensure_topics"]


class TopicsError(Exception):
    """Topics the application needs but cannot have."""


@dataclass
class TopicReport:
    created: list[str]
    existing: list[str]
    warnings: list[str]


def all_topics(app: Application) -> list[TopicSpec]:
    """The blueprint's topics plus one dead-letter topic per streamlet."""
    topics = list(app.topics.values())
    known = {t.name for t in topics}
    for name in app.streamlets:
        dlq = app.dlq_topic(name)
        if dlq not in known:
            topics.append(TopicSpec(name=dlq, partitions=1, replication=_dlq_replication(app)))
            known.add(dlq)
    return topics


def _dlq_replication(app: Application) -> int:
    return min((t.replication for t in app.topics.values()), default=1)


def ensure_topics(admin: AdminClient, app: Application, *, timeout: float = 30.0) -> TopicReport:
    """Create missing managed topics; check existing ones against the blueprint."""
    metadata = admin.list_topics(timeout=timeout)
    report = TopicReport(created=[], existing=[], warnings=[])
    errors: list[str] = []
    to_create: list[NewTopic] = []
    for spec in all_topics(app):
        found = metadata.topics.get(spec.name)
        if found is not None and found.error is None:
            report.existing.append(spec.name)
            _check_existing(admin, spec, len(found.partitions), report, errors)
        elif not spec.managed:
            errors.append(
                f"external topic {spec.name!r} does not exist; create it, "
                "or mark it managed: true so streamflow creates it"
            )
        else:
            to_create.append(
                NewTopic(
                    spec.name,
                    num_partitions=spec.partitions,
                    replication_factor=spec.replication,
                    config=dict(spec.config),
                )
            )
    if to_create:
        _create(admin, to_create, report, errors, timeout)
    if errors:
        raise TopicsError("\n".join(errors))
    return report


def _create(
    admin: AdminClient,
    topics: list[NewTopic],
    report: TopicReport,
    errors: list[str],
    timeout: float,
) -> None:
    for name, future in admin.create_topics(topics, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            report.created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == error.TOPIC_ALREADY_EXISTS:
                report.existing.append(name)
            else:
                errors.append(f"cannot create topic {name!r}: {error.str()}")


def _check_existing(
    admin: AdminClient, spec: TopicSpec, partitions: int, report: TopicReport, errors: list[str]
) -> None:
    if spec.managed and partitions != spec.partitions:
        report.warnings.append(
            f"topic {spec.name!r} has {partitions} partitions but the blueprint says "
            f"{spec.partitions}; streamflow never changes an existing topic's partitions"
        )
    wanted = spec.config.get("cleanup.policy")
    if wanted is None:
        return
    actual = _cleanup_policy(admin, spec.name)
    if actual is not None and set(actual.split(",")) != set(wanted.split(",")):
        errors.append(
            f"topic {spec.name!r} has cleanup.policy={actual} but the blueprint says {wanted}; "
            "fix the topic with kafka-configs, or change the blueprint"
        )


def _cleanup_policy(admin: AdminClient, topic: str) -> str | None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    for future in admin.describe_configs([resource]).values():
        try:
            entries = future.result(timeout=10)
        except KafkaException:
            return None
        entry = entries.get("cleanup.policy")
        return str(entry.value) if entry is not None else None
    return None
