"""The kopf side of the operator: which events wake a reconcile, and kopf's settings.

Every handler ends in :meth:`Reconciler.reconcile` on a fresh read of the
resource, so the handlers hold no logic of their own:

* the resource created, its ``spec`` updated, or found on start (``resume``);
* an event on a Deployment the operator manages (a rollout progressing, pods
  becoming ready, the Deployment deleted by hand): the status follows the
  pods, and a deleted child is put back;
* with the verifier in Jobs, an event on a verifier Job (it started, completed
  or failed): the reconcile waiting for its answer reads it now, not at the
  next resync.

The periodic work (a resync, for anything no event reports, such as a
ConfigMap deleted by hand or topics that could not be created before; and the
autoscaler's ticks, for applications with an autoscaled streamlet) is not
done with kopf's timers but by :mod:`~streamflow.operator.kubernetes.periodic`,
over the applications an event handler here records.

The handlers are registered on a registry of their own (not kopf's global
one), bound to one :class:`Reconciler`, so several operators can live in one
process, as the tests run them. kopf keeps its bookkeeping in annotations
(``operator.streamflow.io/...``), not in ``status``, which belongs to the
CRD's schema.

**No finalizer.** There are no deletion handlers, timers or daemons, the
things kopf puts its finalizer on a resource for: children go with their owner
through garbage collection, and deleting an application never waits for the
operator, even one that is down or uninstalled. An application that still
carries the finalizer of an older operator (which had timers) loses it the
first time this one sees it: kopf takes its own finalizer off a resource that
no handler needs it for, so the finalizer's name is pinned to kopf's default,
the one older operators used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from streamflow.operator.kubernetes import names, periodic, verify_job
from streamflow.operator.kubernetes.autoscaler import Autoscaler
from streamflow.operator.kubernetes.client import KubeAccess, api_message
from streamflow.operator.kubernetes.executor import Cluster
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.rollout_status import RolloutStatus

__all__ = [
    "LEGACY_FINALIZER",
    "ApiEvents",
    "build_registry",
    "build_settings",
    "connection_info",
    "periodic_work",
]

_LOG = logging.getLogger("streamflow.operator")
_RETRY_DELAY_S = 5.0
_Run = Callable[[str | None, str | None], None]  # reconcile (namespace, name), retried by kopf
_STORAGE_PREFIX = f"operator.{names.GROUP}"
# kopf's default finalizer: what operators with timers put on every application.
LEGACY_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


class ApiEvents:
    """Kubernetes Events, written through the operator's own API client.

    Not kopf's poster (``kopf.info``): that one works only inside kopf's
    handlers, and the resync and the autoscaler run on threads of their own
    (:mod:`~streamflow.operator.kubernetes.periodic`). An event that cannot be
    written is logged and dropped: it never fails the reconcile it reports on.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def info(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None:
        self._post(resource, "Normal", reason, message)

    def warn(self, resource: Mapping[str, Any], *, reason: str, message: str) -> None:
        self._post(resource, "Warning", reason, message)

    def _post(self, resource: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self.cluster.post_event(resource, type_=type_, reason=reason, message=message)
        except ApiException as exc:
            _LOG.warning("event %s (%s) not written: %s", reason, message, api_message(exc))
        except (urllib3.exceptions.HTTPError, KeyError) as exc:
            _LOG.warning("event %s (%s) not written: %s", reason, message, exc)


def connection_info(access: KubeAccess) -> kopf.ConnectionInfo:
    """kopf's credentials from the same kubeconfig/context as the kubernetes client's."""
    configuration = access.configuration()
    header = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
    scheme, _, token = (header or "").partition(" ")
    if header and not token:
        scheme, token = "", header
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace=access.default_namespace(),
    )


def build_settings(*, in_main_thread: bool) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True  # one operator per namespace; no peering CRDs needed
    # No watching of CRDs and namespaces (cluster-wide reads a namespaced Role does not
    # grant): the resource is found once at start, so the CRD must be installed first.
    settings.scanning.disabled = True
    settings.persistence.finalizer = LEGACY_FINALIZER  # the one kopf removes when unneeded
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=_STORAGE_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=_STORAGE_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    if not in_main_thread:
        # kopf's last resort kills the thread that runs it; in a host process, never.
        settings.process.ultimate_exiting_timeout = None
    return settings


def _reconcile_with(reconciler: Reconciler) -> _Run:
    def run(namespace: str | None, name: str | None) -> None:
        if not namespace or not name:
            return
        try:
            reconciler.reconcile(namespace, name)
        except ApiException as exc:
            raise kopf.TemporaryError(api_message(exc), delay=_RETRY_DELAY_S) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise kopf.TemporaryError(str(exc), delay=_RETRY_DELAY_S) from None

    return run


def build_registry(
    reconciler: Reconciler,
    access: KubeAccess,
    *,
    known: periodic.Known,
    watch_jobs: bool = False,
) -> kopf.OperatorRegistry:
    """kopf's handlers; ``known`` is kept up to date with the applications watched.

    ``watch_jobs``: also wake an application's reconcile on its verifier Jobs' events.
    """
    registry = kopf.OperatorRegistry()
    run = _reconcile_with(reconciler)

    @kopf.on.login(id="login", registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(access)

    @kopf.on.resume(names.GROUP, names.VERSION, names.PLURAL, id="reconcile", registry=registry)
    @kopf.on.create(names.GROUP, names.VERSION, names.PLURAL, id="reconcile", registry=registry)
    @kopf.on.update(
        names.GROUP, names.VERSION, names.PLURAL, field="spec", id="reconcile", registry=registry
    )
    def changed(namespace: str | None, name: str | None, **_: Any) -> None:
        run(namespace, name)

    @kopf.on.event(names.GROUP, names.VERSION, names.PLURAL, id="known", registry=registry)
    def seen(
        type: str | None,  # kopf names the watch event's type so
        namespace: str | None,
        name: str | None,
        spec: kopf.Spec,
        meta: kopf.Meta,
        **_: Any,
    ) -> None:
        if not namespace or not name:
            return
        if type == "DELETED" or meta.get("deletionTimestamp"):
            known.gone(namespace, name)
        else:
            known.seen(namespace, name, spec)

    @kopf.on.event(
        "apps",
        "v1",
        "deployments",
        labels={"app.kubernetes.io/managed-by": names.MANAGED_BY},
        id="deployment",
        registry=registry,
    )
    def deployment_changed(body: kopf.Body, namespace: str | None, **_: Any) -> None:
        _reconcile_owner(run, body, namespace)

    if watch_jobs:

        @kopf.on.event(
            "batch",
            "v1",
            "jobs",
            labels={
                "app.kubernetes.io/managed-by": names.MANAGED_BY,
                "app.kubernetes.io/component": verify_job.COMPONENT,
            },
            id="verifier-job",
            registry=registry,
        )
        def verifier_job_changed(body: kopf.Body, namespace: str | None, **_: Any) -> None:
            _reconcile_owner(run, body, namespace)

    return registry


def _reconcile_owner(run: _Run, body: kopf.Body, namespace: str | None) -> None:
    owner = _owner(body)
    if owner is not None:
        try:
            run(namespace, owner)
        except kopf.TemporaryError as exc:  # event handlers are not retried: the next event is
            _LOG.warning("reconcile of %s: %s", owner, exc)


def periodic_work(
    reconciler: Reconciler,
    known: periodic.Known,
    *,
    resync_s: float = 60.0,
    autoscaler: Autoscaler | None = None,
    autoscale_s: float = 5.0,
    rollouts: RolloutStatus | None = None,
    rollouts_s: float = 5.0,
) -> list[periodic.Periodic]:
    """The resync of every application, the autoscaler's ticks for the autoscaled ones,
    and the rollout status of each application's serving streamlets."""
    work = [periodic.Periodic(known, every_s=resync_s, action=reconciler.reconcile, name="resync")]
    if autoscaler is not None:
        work.append(
            periodic.Periodic(
                known,
                every_s=autoscale_s,
                action=autoscaler.tick,
                wants=_autoscaled,
                name="autoscale",
            )
        )
    if rollouts is not None:
        work.append(
            periodic.Periodic(known, every_s=rollouts_s, action=rollouts.tick, name="rollouts")
        )
    return work


def _autoscaled(spec: Mapping[str, Any]) -> bool:
    streamlets = spec.get("streamlets") or {}
    return any(isinstance(s, Mapping) and s.get("autoscale") for s in streamlets.values())


def _owner(body: kopf.Body) -> str | None:
    for ref in body.metadata.get("ownerReferences") or []:
        if ref.get("kind") == names.KIND and ref.get("apiVersion") == names.API_VERSION:
            return str(ref.get("name"))
    return None
