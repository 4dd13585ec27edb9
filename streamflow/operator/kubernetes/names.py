"""Every Kubernetes name and label the operator writes, sanitised here and nowhere else.

Blueprint names are already DNS labels, but two of them joined (``app-streamlet``)
can pass the 63 characters a Service name or a label value allows, and a
hand-written resource need not follow the blueprint's rules at all. Whatever
goes in, what comes out is valid: invalid characters become ``-``, and a name
that had to be changed or shortened carries a short digest of the original, so
two different inputs never collapse onto one object.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "API_VERSION",
    "APP_LABEL",
    "CHECKSUM_ANNOTATION",
    "GROUP",
    "KIND",
    "MANAGED_BY",
    "PLURAL",
    "SHORT_NAME",
    "SINGULAR",
    "STREAMLET_ANNOTATION",
    "STREAMLET_LABEL",
    "VERSION",
    "child_name",
    "label_value",
    "resource_name",
]

GROUP = "streamflow.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StreamflowApplication"
PLURAL = "streamflowapplications"
SINGULAR = "streamflowapplication"
SHORT_NAME = "sfapp"
MANAGED_BY = "streamflow-operator"

APP_LABEL = f"{GROUP}/app"
STREAMLET_LABEL = f"{GROUP}/streamlet"
STREAMLET_ANNOTATION = f"{GROUP}/streamlet"  # the exact name, which a label may not hold
CHECKSUM_ANNOTATION = f"{GROUP}/config-checksum"

# A Deployment's pods are named `<deployment>-<10 chars>-<5 chars>`; keeping the
# child name short keeps a pod's name inside the 63 characters of a hostname.
_CHILD_MAX = 47
_LABEL_MAX = 63
_DIGEST = 6
_INVALID = re.compile(r"[^a-z0-9-]+")
_INVALID_LABEL = re.compile(r"[^A-Za-z0-9._-]+")


def resource_name(app: str) -> str:
    """The name of the StreamflowApplication that holds application ``app``."""
    return _dns_label(app, limit=_LABEL_MAX)


def child_name(resource: str, streamlet: str) -> str:
    """The name shared by a streamlet's Deployment, ConfigMap and Service.

    Services need an RFC 1035 label (starting with a letter), the strictest of the three.
    """
    return _dns_label(f"{resource}-{streamlet}", limit=_CHILD_MAX, letter_first=True)


def label_value(text: str) -> str:
    """``text`` as a label value: at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends."""
    clean = _INVALID_LABEL.sub("-", text).strip("-._")
    if clean == text and len(clean) <= _LABEL_MAX:
        return clean
    return _with_digest(clean, text, limit=_LABEL_MAX, strip="-._")


def _dns_label(text: str, *, limit: int, letter_first: bool = False) -> str:
    clean = re.sub(r"-{2,}", "-", _INVALID.sub("-", text.lower())).strip("-")
    if letter_first and not clean[:1].isalpha():
        clean = f"s-{clean}".rstrip("-")
    if clean == text and len(clean) <= limit:
        return clean
    return _with_digest(clean, text, limit=limit, strip="-")


def _with_digest(clean: str, original: str, *, limit: int, strip: str) -> str:
    digest = hashlib.sha256(original.encode()).hexdigest()[:_DIGEST]
    head = clean[: limit - _DIGEST - 1].rstrip(strip)
    return f"{head}-{digest}" if head else f"x-{digest}"
