"""A throw-away certificate authority for the secured development Kafka.

Why generate certificates at start, rather than check some in: a checked-in
private key is a habit worth never teaching, and fixed certificates expire.
Every secured broker gets a fresh CA, so nothing outlives its work dir.

Why PEM files and Python's `cryptography` rather than the JDK's keytool: both
sides read PEM (the broker with `ssl.keystore.type=PEM`, librdkafka with
`ssl.ca.location`/`ssl.certificate.location`/`ssl.key.location`), which are
also what a user's own CA hands out; and key generation here takes
milliseconds where each keytool call is a JVM start. EC P-256 keys, for the
same reason. Keys are written 0600: a world-readable key in /tmp is how test
set-ups leak into habits.

Besides the good certificates this also makes the bad ones the negative tests
need: a client certificate that expired yesterday, and one from an unrelated
CA that the broker does not trust.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # cryptography is a dev dependency: imported only when certificates are made
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["CertificateAuthority", "KeyPair", "Pki", "issue_pki", "new_authority"]

_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files."""

    certificate: Path
    key: Path

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings that present this certificate."""
        return {
            "ssl.certificate.location": str(self.certificate),
            "ssl.key.location": str(self.key),
        }


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA's certificate (the trust anchor clients name in `ssl.ca.location`) and its issuer."""

    certificate: Path
    _key: Any
    _cert: Any

    def issue(
        self,
        folder: Path,
        name: str,
        *,
        server: bool = False,
        valid_from: dt.datetime | None = None,
        valid_until: dt.datetime | None = None,
    ) -> KeyPair:
        """A certificate for `CN=<name>`: a server's names localhost and 127.0.0.1."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = dt.datetime.now(dt.UTC)
        key = _new_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from or now - _DAY)
            .not_valid_after(valid_until or now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return _write_pair(folder, name, cert, key)


def new_authority(folder: Path, name: str) -> CertificateAuthority:
    """A self-signed CA `CN=<name>`, valid for 30 days, its certificate in `<folder>/<name>.pem`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    pair = _write_pair(folder, name, cert, key)
    return CertificateAuthority(certificate=pair.certificate, _key=key, _cert=cert)


@dataclass(frozen=True)
class Pki:
    """Everything a secured broker and its tests need, as files under one folder."""

    ca: CertificateAuthority
    broker: KeyPair
    clients: dict[str, KeyPair]
    expired: KeyPair
    untrusted_ca: CertificateAuthority
    untrusted: KeyPair


def issue_pki(folder: Path, *, clients: tuple[str, ...]) -> Pki:
    """A CA, the broker's certificate, one client certificate per name, and the bad ones.

    `expired` is a client certificate for the first name, from the good CA, that
    expired yesterday; `untrusted` is one for the same name from another CA.
    """
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca = new_authority(folder, "streamflow-devkit-ca")
    now = dt.datetime.now(dt.UTC)
    rogue = new_authority(folder / "untrusted", "streamflow-untrusted-ca")
    return Pki(
        ca=ca,
        broker=ca.issue(folder, "localhost", server=True),
        clients={name: ca.issue(folder, name) for name in clients},
        expired=ca.issue(
            folder / "expired", clients[0], valid_from=now - 3 * _DAY, valid_until=now - _DAY
        ),
        untrusted_ca=rogue,
        untrusted=rogue.issue(folder / "untrusted", clients[0]),
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write_pair(folder: Path, name: str, cert: x509.Certificate, key: Any) -> KeyPair:
    from cryptography.hazmat.primitives import serialization

    folder.mkdir(parents=True, exist_ok=True)
    cert_file = folder / f"{name}.pem"
    key_file = folder / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return KeyPair(certificate=cert_file, key=key_file)
