"""Which Kafka client properties are secrets, and which decide a connection's security.

A blueprint is not a place for credentials: it is committed, shown by
``describe``, copied into a StreamflowApplication's spec and into the
ConfigMap every pod mounts. Credentials reach a client only from the
environment (``STREAMFLOW_KAFKA_<KEY>``), which on Kubernetes is filled from
a Secret. :func:`is_secret` recognises them by name, generously: a property
whose name says password, secret, passphrase or JAAS, or that holds a private
key inline, is one.

On Kubernetes the line is drawn wider (:func:`is_security`): whoever may
create a StreamflowApplication must not be able to choose where the
operator's credentials go or how they are protected on the way, so every
property that decides the transport (``security.protocol``, ``ssl.*``,
``sasl.*``, ``enable.ssl.*``), loads code (``plugin.library.paths``, an SSL
engine, ``sasl.kerberos.kinit.cmd`` under ``sasl.*``) or names other brokers
(``bootstrap.servers``, ``metadata.broker.list``) comes only from the labelled
Secret. Names are compared as librdkafka reads them: case-insensitive, with
``_`` the same as ``.``.
"""

from __future__ import annotations

__all__ = ["ENV_PREFIX", "env_name", "is_secret", "is_security", "normalised"]

ENV_PREFIX = "STREAMFLOW_KAFKA_"

_SECRET_WORDS = frozenset({"password", "secret", "passphrase", "jaas", "credentials"})
_SECRET_ENDINGS = (".key", ".key.pem", "user.info", ".private.key")
_SECRET_NAMES = frozenset({"sasl.oauthbearer.config", "ssl.keystore.key"})

_SECURITY_PREFIXES = (
    "ssl.",
    "sasl.",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
)
_SECURITY_NAMES = frozenset(
    {
        "security.protocol",
        "plugin.library.paths",
        "bootstrap.servers",
        "metadata.broker.list",
        "oauth.cb",
        "client.dns.lookup",
    }
)


def normalised(key: str) -> str:
    """The property as librdkafka matches it: ``SASL_PASSWORD`` is ``sasl.password``."""
    return key.strip().lower().replace("_", ".")


def is_secret(key: str) -> bool:
    """Whether a property's value is a credential (a password, a private key, a token)."""
    name = normalised(key)
    words = set(name.split("."))
    return bool(words & _SECRET_WORDS) or name.endswith(_SECRET_ENDINGS) or name in _SECRET_NAMES


def is_security(key: str) -> bool:
    """Whether a property decides where a client connects, how securely, or what it loads."""
    name = normalised(key)
    return name in _SECURITY_NAMES or name.startswith(_SECURITY_PREFIXES) or is_secret(name)


def env_name(key: str) -> str:
    """The variable a replica reads the property from (``STREAMFLOW_KAFKA_SASL_PASSWORD``)."""
    return ENV_PREFIX + normalised(key).upper().replace(".", "_")
