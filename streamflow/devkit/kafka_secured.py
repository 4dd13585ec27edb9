"""The development Kafka as production runs it: SASL_SSL, mutual TLS, and ACLs.

Why a secured mode at all: every client streamflow builds (replicas, `tail`,
`model push`, the operator's AdminClient, the bench load generator) must carry
the same security settings, and the only proof that they do is a broker that
refuses them when they don't. So this broker has, besides the plaintext one:

* a SASL_SSL listener (SCRAM-SHA-512 over TLS), the usual managed-Kafka set-up;
* an SSL listener with `ssl.client.auth=required` (mutual TLS);
* the KRaft StandardAuthorizer, so a principal can do only what ACLs grant.

Choices, each for a reason:

* Certificates come from a fresh CA made at start (`certs`), as PEM files, so
  nothing secret is checked in and nothing expires between runs.
* SCRAM users are created by Kafka's own `kafka-storage format --add-scram`,
  so they exist before the broker first answers: no window where a client
  races their creation.
* A TLS certificate's principal is its CN (`CN=serving` is `User:serving`), the
  same name as the SCRAM user: one ACL covers a streamlet whichever way it
  authenticates.
* The plaintext listener stays, bound to 127.0.0.1, for the controller and the
  broker's own traffic; its principal (`User:ANONYMOUS`) is a super user, like
  `admin`. It is the devkit's back door for set-up, not something to copy.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from streamflow.devkit import _local, certs
from streamflow.devkit.kafka import DevkitError, KafkaBroker

__all__ = ["SCRAM_MECHANISM", "SecuredKafkaBroker"]

SCRAM_MECHANISM = "SCRAM-SHA-512"
_HOST = "127.0.0.1"
_ADVERTISED = "localhost"  # the name the broker's certificate carries
_ADMIN = "admin"


class SecuredKafkaBroker(KafkaBroker):
    """A `KafkaBroker` with SASL_SSL and mTLS listeners and ACLs; see the module docstring.

    `users` are the SCRAM users (each also gets a client certificate `CN=<user>`);
    `admin` is always one, and a super user.
    """

    def __init__(
        self,
        *,
        users: Sequence[str] = ("streamflow", "serving"),
        lib_dir: Path | None = None,
        work_dir: Path | None = None,
        heap: str = "384m",
        keep: bool = False,
        overrides: Mapping[str, str | int] | None = None,
    ) -> None:
        super().__init__(
            lib_dir=lib_dir, work_dir=work_dir, heap=heap, keep=keep, overrides=overrides
        )
        self.users = tuple(dict.fromkeys((_ADMIN, *users)))
        self.passwords = {user: secrets.token_urlsafe(18) for user in self.users}
        self._secured_ports: tuple[int, int] | None = None
        self._pki: certs.Pki | None = None

    @property
    def sasl_bootstrap(self) -> str:
        """`localhost:<port>` of the SASL_SSL listener."""
        return f"{_ADVERTISED}:{self._secured()[0]}"

    @property
    def mtls_bootstrap(self) -> str:
        """`localhost:<port>` of the mutual-TLS listener."""
        return f"{_ADVERTISED}:{self._secured()[1]}"

    @property
    def pki(self) -> certs.Pki:
        """The CA, the broker's and the clients' certificates (and the bad ones), as files."""
        if self._pki is None:
            raise DevkitError("The secured Kafka broker has not been started.")
        return self._pki

    @property
    def ca_file(self) -> Path:
        return self.pki.ca.certificate

    def sasl_config(
        self, user: str = "streamflow", *, password: str | None = None
    ) -> dict[str, Any]:
        """librdkafka settings for `user` over SASL_SSL, bootstrap included."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": user,
            "sasl.password": self.passwords[user] if password is None else password,
            "ssl.ca.location": str(self.ca_file),
        }

    def mtls_config(self, user: str = "streamflow") -> dict[str, Any]:
        """librdkafka settings presenting `CN=<user>`'s certificate, bootstrap included."""
        return {
            "bootstrap.servers": self.mtls_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_file),
            **self.pki.clients[user].client_config(),
        }

    def admin_config(self) -> dict[str, Any]:
        """The super user's SASL_SSL settings: for creating ACLs and topics."""
        return self.sasl_config(_ADMIN)

    def start(self, *, timeout: float = 60.0) -> None:
        work_dir = self._prepare_work_dir()
        if self._pki is None:
            self._pki = certs.issue_pki(work_dir / "tls", clients=self.users)
        super().start(timeout=timeout)

    def stop(self) -> None:
        super().stop()
        self._secured_ports = None
        self._pki = None

    def _pick_ports(self) -> None:
        super()._pick_ports()
        sasl, mtls = _local.free_ports(2)
        self._secured_ports = (sasl, mtls)

    def _secured(self) -> tuple[int, int]:
        if self._secured_ports is None:
            raise DevkitError("The secured Kafka broker has not been started.")
        return self._secured_ports

    def _extra_settings(self, work_dir: Path) -> dict[str, str]:
        plain = self.bootstrap_servers
        controller = f"{_HOST}:{self._controller_port}"
        sasl, mtls = self._secured()
        pki = self.pki
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "listeners": (
                f"PLAINTEXT://{plain},CONTROLLER://{controller},"
                f"SASL_SSL://{_HOST}:{sasl},MTLS://{_HOST}:{mtls}"
            ),
            "advertised.listeners": (
                f"PLAINTEXT://{plain},SASL_SSL://{_ADVERTISED}:{sasl},MTLS://{_ADVERTISED}:{mtls}"
            ),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL"
            ),
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": jaas,
            "listener.name.mtls.ssl.client.auth": "required",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(_keystore(pki.broker)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca.certificate),
            # `CN=serving` -> `User:serving`, the same principal as the SCRAM user.
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{_ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _format_arguments(self) -> list[str]:
        arguments: list[str] = []
        for user in self.users:
            scram = f"{SCRAM_MECHANISM}=[name={user},password={self.passwords[user]}]"
            arguments += ["--add-scram", scram]
        return arguments

    @property
    def _controller_port(self) -> int:
        assert self._ports is not None
        return self._ports[1]


def _keystore(pair: certs.KeyPair) -> Path:
    """The broker's PEM keystore: its private key followed by its certificate, one file."""
    path = pair.key.with_suffix(".keystore.pem")
    path.write_bytes(pair.key.read_bytes() + pair.certificate.read_bytes())
    path.chmod(0o600)
    return path
