"""Running the operator: ``streamflow operator run``, and the tests' in-process operator.

:class:`Operator` assembles the pieces (one API client, the reconciler, the
kopf registry and settings) and runs kopf until its stop flag is set or a
signal arrives. It watches the namespaces it is given (its own, by default,
which a namespaced Role suffices for) or, with ``clusterwide``, all of them.
The tests run it on a thread with a ``threading.Event`` as the stop flag and
read :attr:`Operator.reconciler`'s history to see what each reconcile did.
The periodic work (resync, autoscaling) runs on threads of its own beside
kopf (:mod:`~streamflow.operator.kubernetes.periodic`), started before kopf and
stopped when it returns, so no application gets kopf's finalizer.

``verify_in`` says where each spec is verified (:data:`VERIFY_IN`): ``job``,
the default, in a Job from the application's own image (what a cluster needs,
where the operator's image holds no application's code); ``operator``, in a
child process of the operator, for an operator that runs beside the code (the
tests, on simulated nodes that run no Job).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import kopf

from streamflow.operator.kubernetes import handlers, periodic
from streamflow.operator.kubernetes.autoscaler import Autoscaler
from streamflow.operator.kubernetes.client import KubeAccess
from streamflow.operator.kubernetes.executor import Cluster
from streamflow.operator.kubernetes.job_verifier import JobVerifier
from streamflow.operator.kubernetes.reconcile import Reconciler
from streamflow.operator.kubernetes.rollout_status import RolloutStatus
from streamflow.operator.kubernetes.verify import AppVerifier, Verifier

__all__ = ["VERIFY_IN", "Operator"]

VERIFY_IN = ("job", "operator")


class Operator:
    """A kopf operator for StreamflowApplications in some namespaces (or all)."""

    def __init__(
        self,
        *,
        access: KubeAccess,
        namespaces: Sequence[str] = (),
        clusterwide: bool = False,
        resync_s: float = 60.0,
        liveness_endpoint: str | None = None,
        autoscale_s: float = 5.0,
        rollouts_s: float = 5.0,
        keda_installed: Callable[[], bool] | None = None,
        allowed_images: Sequence[str] = (),
        verify_in: str = "job",
        verifier: AppVerifier | None = None,
    ) -> None:
        """``autoscale_s``: how often autoscaled streamlets are measured; ``rollouts_s``: how
        often the serving streamlets' rollouts are read into the status; ``keda_installed``
        overrides asking the cluster whether it serves KEDA's ScaledObjects (tests);
        ``allowed_images``: the image patterns an application may use (empty: none;
        ``streamflow operator run`` defaults them to its own image's registry);
        ``verify_in``: ``job`` or ``operator`` (see the module); ``verifier``: another
        verifier, which ``verify_in`` then does not choose."""
        if verify_in not in VERIFY_IN:
            raise ValueError(f"verify_in is {verify_in!r}: use one of {', '.join(VERIFY_IN)}")
        if not namespaces and not clusterwide:
            namespaces = [access.default_namespace()]
        self.access = access
        self.namespaces = list(namespaces)
        self.clusterwide = clusterwide
        self.liveness_endpoint = liveness_endpoint
        self.api = access.api_client()
        cluster = Cluster(self.api)
        if verifier is None:
            verifier = JobVerifier(cluster) if verify_in == "job" else Verifier()
        self.reconciler = Reconciler(
            cluster,
            handlers.ApiEvents(cluster),
            keda_installed=keda_installed,
            allowed_images=tuple(allowed_images),
            verifier=verifier,
        )
        self.autoscaler = Autoscaler(self.reconciler)
        self.rollouts = RolloutStatus(self.reconciler)
        self.known = periodic.Known()
        self.registry = handlers.build_registry(
            self.reconciler,
            access,
            known=self.known,
            watch_jobs=isinstance(verifier, JobVerifier),
        )
        self.periodic = handlers.periodic_work(
            self.reconciler,
            self.known,
            resync_s=resync_s,
            autoscaler=self.autoscaler,
            autoscale_s=autoscale_s,
            rollouts=self.rollouts,
            rollouts_s=rollouts_s,
        )

    def run(
        self,
        *,
        stop_flag: threading.Event | None = None,
        ready_flag: threading.Event | None = None,
    ) -> None:
        """Run until ``stop_flag`` is set, or SIGINT/SIGTERM when on the main thread."""
        in_main = threading.current_thread() is threading.main_thread()
        settings = handlers.build_settings(in_main_thread=in_main)
        done = threading.Event()  # ends the periodic work when kopf ends, however it ends
        # Started before kopf, in no context of its: the reconciler posts its events
        # through its own API client (handlers.ApiEvents), not through kopf.info/warn.
        threads = [work.start(done) for work in self.periodic]
        try:
            asyncio.run(
                kopf.operator(
                    registry=self.registry,
                    settings=settings,
                    namespaces=self.namespaces,
                    clusterwide=self.clusterwide,
                    standalone=True,
                    stop_flag=stop_flag,
                    ready_flag=ready_flag,
                    liveness_endpoint=self.liveness_endpoint,
                    memo=kopf.Memo(),
                )
            )
        finally:
            done.set()
            for thread in threads:
                thread.join()
            self.api.close()  # type: ignore[no-untyped-call]
