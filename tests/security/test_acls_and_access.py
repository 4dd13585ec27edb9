"""The secured broker itself: both listeners, ACLs, and the clear errors of a bad client config.

What a user sees when the password is wrong, the CA is not the broker's, or the
client certificate has expired is `kafka_access.check_access`'s message: it must
name the cause within seconds, never hang until some later timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, ResourceType  # type: ignore[attr-defined]

from streamflow import devkit
from streamflow.runtime.kafka_access import KafkaAccessError, check_access
from tests.security.conftest import grant

BOUND_S = 15.0  # a clear error arrives well within this, or the test fails


def _consume_one(config: dict[str, Any], topic: str, *, timeout: float = 30) -> bytes | None:
    consumer = Consumer({**config, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return msg.value()
        return None
    finally:
        consumer.close()


def _produce(config: dict[str, Any], topic: str, value: bytes) -> KafkaError | None:
    """Produce one record; the error of its delivery report, or None when it was written."""
    reports: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 15_000})
    producer.produce(topic, value, b"wine", on_delivery=lambda error, _msg: reports.append(error))
    producer.flush(30)
    assert reports, "no delivery report within 30 s"
    return reports[0]


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_the_app_principal_writes_and_reads_on_either_listener(
    secured_kafka: devkit.SecuredKafkaBroker, secured_topic: Callable[..., str], listener: str
) -> None:
    config = secured_kafka.sasl_config() if listener == "sasl_ssl" else secured_kafka.mtls_config()
    topic = secured_topic("both")
    assert _produce(config, topic, b"hello") is None
    assert _consume_one(config, topic) == b"hello"


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_the_serving_principal_reads_the_control_topic_but_cannot_write_it(
    secured_kafka: devkit.SecuredKafkaBroker, secured_topic: Callable[..., str], listener: str
) -> None:
    control = secured_topic("models", config={"cleanup.policy": "compact"})
    grant(secured_kafka, "serving", ResourceType.TOPIC, control, AclOperation.READ)
    grant(secured_kafka, "serving", ResourceType.GROUP, f"read-{control}", AclOperation.READ)
    assert _produce(secured_kafka.admin_config(), control, b"descriptor-v1") is None
    serving = (
        secured_kafka.sasl_config("serving")
        if listener == "sasl_ssl"
        else secured_kafka.mtls_config("serving")
    )

    assert _consume_one(serving, control) == b"descriptor-v1"
    error = _produce(serving, control, b"descriptor-from-a-replica")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _assert_fails_fast(config: dict[str, Any], *expected: str) -> str:
    started = time.monotonic()
    with pytest.raises(KafkaAccessError) as caught:
        check_access(config, timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S, "it waited for the deadline instead of the cause"
    message = str(caught.value)
    for text in expected:
        assert text in message, message
    return message


def test_a_wrong_password_is_named_as_failed_sasl_authentication(
    secured_kafka: devkit.SecuredKafkaBroker,
) -> None:
    config = secured_kafka.sasl_config(password="not-the-password")
    _assert_fails_fast(config, "SASL authentication failed", "'streamflow'", "sasl.password")


def test_an_untrusted_ca_is_named_as_failed_certificate_verification(
    secured_kafka: devkit.SecuredKafkaBroker,
) -> None:
    config = secured_kafka.sasl_config()
    config["ssl.ca.location"] = str(secured_kafka.pki.untrusted_ca.certificate)
    _assert_fails_fast(config, "TLS certificate verification failed", "ssl.ca.location")


def test_an_expired_client_certificate_is_named_as_expired(
    secured_kafka: devkit.SecuredKafkaBroker,
) -> None:
    config = {**secured_kafka.mtls_config(), **secured_kafka.pki.expired.client_config()}
    _assert_fails_fast(config, "rejected this client's TLS certificate", "expired on")


def test_a_client_certificate_from_another_ca_is_rejected_clearly(
    secured_kafka: devkit.SecuredKafkaBroker,
) -> None:
    config = {**secured_kafka.mtls_config(), **secured_kafka.pki.untrusted.client_config()}
    _assert_fails_fast(config, "rejected this client's TLS certificate")


def test_good_credentials_pass_the_access_check(secured_kafka: devkit.SecuredKafkaBroker) -> None:
    check_access(secured_kafka.sasl_config(), timeout=BOUND_S)
    check_access(secured_kafka.mtls_config(), timeout=BOUND_S)
