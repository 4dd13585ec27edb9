"""Helpers of the operator tests: the test application, an in-process operator, how long to wait.

The operator runs in this process, on a thread of its own, exactly as
``streamflow operator run`` runs it (the same :class:`Operator`), watching
only the test's namespace; stopping it is kopf's stop flag, and its
reconciler's history tells a test what each reconcile did.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamflow.blueprint import load_application
from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes.client import KubeAccess
from streamflow.operator.kubernetes.reconcile import Outcome
from streamflow.operator.kubernetes.runner import Operator

BLUEPRINT = Path(__file__).parent / "app" / "blueprint.yaml"
WAIT_S = 60.0
POLL_S = 0.2  # how often a wait asks the API server again
# kwok's nodes pull nothing: any image reference will do, as long as there is one.
TEST_IMAGE = "registry.example/streamflow-tests:1"
# What the tests' operators admit (``--allowed-images``): the registries of their images.
TEST_REGISTRY = "registry.example/"
TEST_REGISTRIES = (TEST_REGISTRY, "reg.example/")


def make_application(
    *, bootstrap: str, blueprint: Path = BLUEPRINT, prefix: str = "wine"
) -> Application:
    """The test blueprint (or another) under a unique name (so its topics are its own), on
    ``bootstrap``."""
    data = load_application(blueprint).to_dict()
    suffix = uuid.uuid4().hex[:6]
    data["name"] = f"{prefix}-{suffix}"
    data["kafka"]["bootstrap"] = bootstrap
    data["topics"] = {f"{name}-{suffix}": topic for name, topic in data["topics"].items()}
    return Application.from_dict(data)


class OperatorThread:
    """The operator, started on a thread until :meth:`stop`."""

    def __init__(self, *, kubeconfig: Path, namespace: str, **options: Any) -> None:
        """``options``: more :class:`Operator` settings (``autoscale_s``, ``keda_installed``).

        Specs are verified in the operator's process (``verify_in="operator"``) unless
        a test says otherwise: kwok's nodes never run the verifier's Job. The images
        admitted are those of TEST_REGISTRIES unless a test names others (``allowed_images``).
        """
        self.operator = Operator(
            access=KubeAccess(kubeconfig=str(kubeconfig)),
            namespaces=[namespace],
            resync_s=30,
            **{"verify_in": "operator", "allowed_images": TEST_REGISTRIES, **options},
        )
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="operator", daemon=True)

    def _run(self) -> None:
        try:
            self.operator.run(stop_flag=self._stop, ready_flag=self._ready)
        except BaseException as exc:  # surfaced by stop() and start()
            self._error = exc
            self._ready.set()

    def start(self) -> OperatorThread:
        self._thread.start()
        assert self._ready.wait(WAIT_S), "the operator did not get ready"
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the operator did not stop"
        if self._error is not None:
            raise self._error

    @property
    def history(self) -> list[Outcome]:
        return list(self.operator.reconciler.history)


def get_json(kubectl: Callable[..., str], *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o=json"))
