"""Why a Kafka client cannot connect, said in a sentence, within a deadline.

librdkafka never gives up on a broker: a wrong password, an untrusted CA or a
rejected client certificate make it retry forever, and the caller sees only
`_TRANSPORT` timeouts ("Broker transport failure") while the real cause goes
to an error callback or the log. A user then gets a hang, or a raw line of
OpenSSL. So before a command or a replica starts its real work, it calls
`check_access` with the same client config: a short-lived AdminClient asks for
metadata and listens on `error_cb`, and the first authentication or TLS error
becomes a `KafkaAccessError` whose message names the cause and the setting to
fix. It gives up at a deadline with the last error it saw, never hangs.

The probe's own log is silenced (`log_level` 0): the message is the report.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

__all__ = ["KafkaAccessError", "check_access", "describe", "describe_denial"]

_ENV_HINT = "STREAMFLOW_KAFKA_"
_PREFIX = re.compile(r"^[a-z_]+://\S+/\S+: ")
# A peer's TLS alerts: what a broker sends when it refuses a client certificate.
_CERT_ALERTS = ("certificate unknown", "certificate expired", "bad certificate", "unknown ca")


class KafkaAccessError(RuntimeError):
    """Kafka could not be used with this client config; the message says why and what to do."""


def check_access(config: Mapping[str, Any], *, timeout: float = 15.0) -> None:
    """Return once Kafka answers with this config; else raise `KafkaAccessError` naming why."""
    errors: list[KafkaError] = []
    probe = {k: v for k, v in config.items() if k not in ("logger", "error_cb", "stats_cb")}
    probe |= {"error_cb": errors.append, "log_level": 0}
    probe.setdefault("socket.connection.setup.timeout.ms", int(max(1.0, timeout) * 1000))
    try:
        admin = AdminClient(probe)
    except KafkaException as exc:  # e.g. ssl.ca.location names no file
        raise KafkaAccessError(f"invalid Kafka client configuration: {exc.args[0].str()}") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            if admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic()))).brokers:
                return
        except KafkaException as exc:
            errors.append(exc.args[0])
        admin.poll(0.05)  # serves error_cb
        for error in errors:
            if (message := describe(error, config)) is not None:
                raise KafkaAccessError(message)
        if time.monotonic() >= deadline:
            last = errors[-1].str() if errors else "no answer"
            where = config.get("bootstrap.servers", "?")
            raise KafkaAccessError(
                f"cannot reach Kafka at {where} within {timeout:g} s ({last}); check the "
                "bootstrap servers and security.protocol"
            )


def describe(error: KafkaError, config: Mapping[str, Any]) -> str | None:
    """A sentence naming an authentication or TLS cause, or None for other errors."""
    code, text = error.code(), error.str()
    where = config.get("bootstrap.servers", "?")
    lowered = text.lower()
    if code == KafkaError._AUTHENTICATION:
        user = config.get("sasl.username", "?")
        mechanism = config.get("sasl.mechanism", config.get("sasl.mechanisms", "?"))
        return (
            f"SASL authentication failed: Kafka at {where} refused the credentials of user "
            f"{user!r} ({mechanism}). Check sasl.username and sasl.password "
            f"({_ENV_HINT}SASL_USERNAME, {_ENV_HINT}SASL_PASSWORD). [{_detail(text)}]"
        )
    if "certificate verify failed" in lowered:
        ca = config.get("ssl.ca.location") or "the system's CA store"
        return (
            f"TLS certificate verification failed: the certificate of Kafka at {where} is not "
            f"signed by a CA in ssl.ca.location ({ca}), or does not name that host. Set "
            f"ssl.ca.location to the CA that issued the broker's certificate. [{_detail(text)}]"
        )
    if any(alert in lowered for alert in _CERT_ALERTS):
        cert = config.get("ssl.certificate.location")
        why = _certificate_problem(Path(cert)) if cert else None
        reason = why or "it may have expired, or not be issued by a CA the broker trusts"
        return (
            f"Kafka at {where} rejected this client's TLS certificate "
            f"(ssl.certificate.location={cert or 'unset'}): {reason}. [{_detail(text)}]"
        )
    if code == KafkaError._SSL:
        return f"TLS with Kafka at {where} failed: {_detail(text)}"
    return None


_DENIALS = (
    "TOPIC_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
)


def describe_denial(error: KafkaError, config: Mapping[str, Any], *, topic: str) -> str | None:
    """A sentence for an ACL refusal on writing `topic`, or None for other errors.

    An idempotent producer without WRITE anywhere is refused its producer id
    (CLUSTER_AUTHORIZATION_FAILED) before any record is sent: the same cause.
    """
    if error.name() not in _DENIALS:
        return None
    who = (
        f"user {config['sasl.username']!r}"
        if config.get("sasl.username")
        else f"the certificate {config.get('ssl.certificate.location', '(none)')}"
    )
    return (
        f"Kafka's ACLs do not authorize {who} to write to {topic} ({error.name()}). Writing "
        "this topic is a privilege: use a principal granted WRITE on it, or ask the cluster's "
        "administrator (see SECURITY.md, Secured Kafka)."
    )


def _certificate_problem(path: Path) -> str | None:
    """`expired on ...` / `not valid before ...` for a PEM certificate, when that can be read.

    `cryptography` is optional here: without it the message is less precise, not wrong.
    """
    try:
        from cryptography import x509
    except ImportError:
        return None
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return f"it cannot be read as a PEM certificate ({path})"
    now = dt.datetime.now(dt.UTC)
    if cert.not_valid_after_utc < now:
        return f"the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_before_utc > now:
        return f"the certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    return None


def _detail(text: str) -> str:
    """librdkafka's text without its `proto://host:port/id: ` prefix and timing suffix."""
    return _PREFIX.sub("", text, count=1).split(" (after ", 1)[0]
