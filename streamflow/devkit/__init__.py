"""Local development infrastructure: a real Apache Kafka for `streamflow run`, tests and bench."""

from streamflow.devkit.kafka import (
    DevkitError,
    KafkaBroker,
    create_topic,
    find_java,
    find_kafka_lib,
)

__all__ = ["DevkitError", "KafkaBroker", "create_topic", "find_java", "find_kafka_lib"]
