"""Reaching the Kubernetes API: which cluster, as whom, and what to tell a user when it fails.

Every caller (the operator, ``--target kubernetes``) names its cluster
explicitly, by kubeconfig file and context, and gets an ``ApiClient`` of its
own: the kubernetes library's process-wide default configuration is never
touched, so two clusters (or two operators in one test process) never share
credentials by accident. Without a kubeconfig, a pod's service account is
used, then ``$KUBECONFIG`` or ``~/.kube/config``, as kubectl does.

API failures become :class:`KubeError` with a sentence a user can act on:
an unreachable server, refused credentials, a missing CRD.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

__all__ = ["KubeAccess", "KubeError", "api_message", "explain"]

_IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# (connect, read) seconds: an unreachable server fails fast instead of hanging a command.
REQUEST_TIMEOUT = (5.0, 30.0)


class KubeError(Exception):
    """A Kubernetes failure, phrased for the user."""


@dataclass(frozen=True)
class KubeAccess:
    """Which cluster to talk to: a kubeconfig file and context, or the pod's service account."""

    kubeconfig: str | None = None
    context: str | None = None

    def configuration(self) -> client.Configuration:
        configuration = client.Configuration()
        path = self.kubeconfig or os.environ.get("KUBECONFIG")
        try:
            if path is None and self.context is None and _in_cluster():
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path,
                    context=self.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except (ConfigException, OSError) as exc:
            where = path or "~/.kube/config"
            raise KubeError(
                f"cannot load the Kubernetes configuration from {where}: {str(exc).rstrip('.')}. "
                "Pass --kubeconfig FILE (and --context NAME), or set $KUBECONFIG."
            ) from None
        configuration.retries = 1
        return configuration

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(self.configuration())

    def check(self, *, group: str, version: str) -> str:
        """The server's version; a :class:`KubeError` if it cannot be reached or lacks the group.

        ``group``/``version``: an API the caller needs served (a CRD's), checked by discovery.
        """
        configuration = self.configuration()
        with client.ApiClient(configuration) as api:
            try:
                info = client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT)
                groups = client.ApisApi(api).get_api_versions(_request_timeout=REQUEST_TIMEOUT)
            except Exception as exc:
                raise explain(exc, server=configuration.host) from None
        served = {v.group_version for g in groups.groups or [] for v in g.versions or []}
        if f"{group}/{version}" not in served:
            raise KubeError(
                f"the cluster at {configuration.host} does not serve {group}/{version}: "
                "install the CRD first (`streamflow operator manifests | kubectl apply -f -`)"
            )
        return str(info.git_version)

    def default_namespace(self) -> str:
        """The context's namespace, the pod's own namespace, else ``default``."""
        path = self.kubeconfig or os.environ.get("KUBECONFIG")
        if path is None and self.context is None and _in_cluster():
            return _IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
        try:
            contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=path
            )
        except (ConfigException, OSError):
            return "default"
        chosen = current
        if self.context is not None:
            chosen = next((c for c in contexts if c.get("name") == self.context), current)
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and _IN_CLUSTER_NAMESPACE.exists()


def api_message(exc: ApiException) -> str:
    """The API server's own message out of an ApiException's body."""
    try:
        payload: Any = json.loads(exc.body or "")
    except (TypeError, ValueError):
        payload = None
    if isinstance(payload, dict) and payload.get("message"):
        return str(payload["message"])
    return f"{exc.status} {exc.reason}".strip()


def explain(exc: BaseException, *, server: str | None = None) -> KubeError:
    """A :class:`KubeError` for a failed API call, saying what to check."""
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return KubeError(
                f"the Kubernetes API server refused the request ({exc.status}): "
                f"{api_message(exc)}. Check your credentials and RBAC permissions."
            )
        return KubeError(f"the Kubernetes API server answered {exc.status}: {api_message(exc)}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        where = f" at {server}" if server else ""
        return KubeError(
            f"cannot reach the Kubernetes API server{where} ({_reason(exc)}). "
            "Is the cluster running, and are --kubeconfig/--context right?"
        )
    return KubeError(f"{type(exc).__name__}: {exc}")


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    inner = reason if isinstance(reason, BaseException) else exc
    text = str(inner)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return text.split(": ", 1)[-1][:200]
