"""Deleting an application never waits for the operator: it puts no finalizer on it.

With the operator stopped, ``kubectl delete --wait`` completes and the
control plane's garbage collector removes the children; an application that
carries the finalizer of an older operator loses it when this one starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes import spec
from streamflow.operator.kubernetes.handlers import LEGACY_FINALIZER
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json
from tests.waiting import wait_until

IMAGE = "reg.example/wine:1"
StartOperator = Callable[..., OperatorThread]


def _resource(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(kubectl, "sfapp", name, "-n", namespace)
    return found


def _deployments(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    listing = get_json(kubectl, "deployments", "-n", namespace, "-l", f"streamflow.io/app={name}")
    return [item["metadata"]["name"] for item in listing["items"]]


def _running(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        found = _resource(kubectl, namespace, name)
        status = found.get("status") or {}
        return found if status.get("phase") == "Running" else None

    found: dict[str, Any] = wait_until(
        running, what=f"{name} to be Running", timeout=WAIT_S, interval=POLL_S
    )
    return found


def test_with_the_operator_stopped_a_delete_completes_and_the_children_are_collected(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, application: Application
) -> None:
    operator = start_operator()
    body = spec.body(application, namespace=namespace, pods=spec.PodSettings(image=IMAGE))
    kubectl("apply", "-f", "-", input=json.dumps(body))
    name = body["metadata"]["name"]
    found = _running(kubectl, namespace, name)
    assert not found["metadata"].get("finalizers"), found["metadata"].get("finalizers")
    assert _deployments(kubectl, namespace, name)
    operator.stop()

    kubectl("delete", "sfapp", name, "-n", namespace, "--wait=true", "--timeout=60s")
    wait_until(
        lambda: not _deployments(kubectl, namespace, name),
        what="the garbage collector to delete the Deployments",
        timeout=WAIT_S,
        interval=POLL_S,
    )


def test_the_finalizer_an_older_operator_left_is_removed(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, application: Application
) -> None:
    body = spec.body(application, namespace=namespace, pods=spec.PodSettings(image=IMAGE))
    body["metadata"]["finalizers"] = [LEGACY_FINALIZER]
    kubectl("apply", "-f", "-", input=json.dumps(body))
    name = body["metadata"]["name"]
    start_operator()

    def released() -> bool:
        return not _resource(kubectl, namespace, name)["metadata"].get("finalizers")

    wait_until(
        released, what=f"{LEGACY_FINALIZER} to be taken off {name}", timeout=WAIT_S, interval=POLL_S
    )
    _running(kubectl, namespace, name)
