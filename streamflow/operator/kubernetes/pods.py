"""A streamlet's pods, as ``streamflow status`` and ``streamflow logs`` show them.

Pods are found by the labels the operator gives them, grouped by streamlet
and numbered in order of creation (a Deployment has no ordinals; the number
only lets ``logs --replica N`` pick one). Logs come from the API server,
which asks each pod's kubelet; when no kubelet can answer (kwok's simulated
nodes run nothing, so they have no logs), the user is told so, not shown a
traceback.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from streamflow.operator import targets
from streamflow.operator.kubernetes import names
from streamflow.operator.kubernetes.client import REQUEST_TIMEOUT, api_message
from streamflow.operator.kubernetes.executor import decode
from streamflow.operator.kubernetes.resources import HEALTH_PORT

__all__ = ["by_streamlet", "logs", "pick", "streamlet_status"]

_CONTAINER = "streamlet"


def by_streamlet(core: client.CoreV1Api, namespace: str, resource: str) -> dict[str, list[Any]]:
    """The live pods of an application, by streamlet, oldest first."""
    selector = f"{names.APP_LABEL}={names.label_value(resource)}"
    listing = decode(
        core.list_namespaced_pod(
            namespace,
            label_selector=selector,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
    )
    out: dict[str, list[Any]] = {}
    for pod in listing.get("items") or []:
        metadata = pod.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            continue
        streamlet = (metadata.get("labels") or {}).get(names.STREAMLET_LABEL)
        if streamlet:
            out.setdefault(str(streamlet), []).append(pod)
    for found in out.values():
        found.sort(
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
        )
    return out


def pick(pods: Sequence[Any], replica: int | None) -> list[Any]:
    if replica is None:
        return list(pods)
    return [pods[replica]] if 0 <= replica < len(pods) else []


def streamlet_status(name: str, desired: int, pods: Sequence[Any]) -> targets.StreamletStatus:
    replicas = tuple(_replica(name, index, pod) for index, pod in enumerate(pods))
    return targets.StreamletStatus(
        name=name,
        desired=desired,
        ready=sum(r.ready for r in replicas),
        running=sum(r.running for r in replicas),
        restarts=sum(r.restarts for r in replicas),
        replicas=replicas,
    )


def _replica(streamlet: str, index: int, pod: Any) -> targets.ReplicaStatus:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    reasons = [
        f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
        for c in containers
        if (waiting := (c.get("state") or {}).get("waiting"))
    ]
    exits = [
        int(terminated["exitCode"])
        for c in containers
        if (terminated := (c.get("lastState") or {}).get("terminated"))
    ]
    name = pod["metadata"]["name"]
    ip = status.get("podIP")
    host = f"[{ip}]" if ip and ":" in ip else ip  # an IPv6 address in a URL is bracketed
    return targets.ReplicaStatus(
        name=name,
        streamlet=streamlet,
        index=index,
        running=status.get("phase") == "Running",
        ready=ready,
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        pod=name,
        # reachable from inside the cluster: the operator's web view reads /metrics there
        endpoint=f"http://{host}:{HEALTH_PORT}" if host else None,
        reasons=tuple(reasons),
        last_exit=exits[-1] if exits else None,
    )


def logs(
    core: client.CoreV1Api,
    namespace: str,
    pods: Sequence[Any],
    *,
    follow: bool,
    tail: int | None,
) -> Iterator[targets.LogLine]:
    """Each pod's log lines (interleaved as they come with ``follow``)."""
    opened, failures = [], []
    for pod in pods:
        name = pod["metadata"]["name"]
        try:
            response = core.read_namespaced_pod_log(
                name,
                namespace,
                container=_CONTAINER,
                follow=follow,
                tail_lines=tail,
                _preload_content=False,
                _request_timeout=None if follow else REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            failures.append(f"{name}: {api_message(exc)}")
            continue
        opened.append((name, response))
    if not opened:
        raise targets.TargetError(
            "no logs are available from the pods",
            hint="on simulated nodes (kwok) pods run nothing and have no logs",
            problems=failures,
        )
    return _stream(opened) if follow else _read(opened)


def _read(opened: list[tuple[str, Any]]) -> Iterator[targets.LogLine]:
    for name, response in opened:
        for line in response.data.decode(errors="replace").splitlines():
            yield targets.LogLine(name, line)


def _stream(opened: list[tuple[str, Any]]) -> Iterator[targets.LogLine]:
    lines: queue.Queue[targets.LogLine | None] = queue.Queue()

    def pump(name: str, response: Any) -> None:
        pending = b""
        try:
            for chunk in response.stream(amt=4096):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    lines.put(targets.LogLine(name, line.decode(errors="replace")))
        except Exception:  # the stream closed under us (pod deleted, Ctrl-C): this pod is done
            pass
        finally:
            lines.put(None)

    threads = [threading.Thread(target=pump, args=item, daemon=True) for item in opened]
    for thread in threads:
        thread.start()
    remaining = len(threads)
    try:
        while remaining:
            item = lines.get()
            if item is None:
                remaining -= 1
            else:
                yield item
    finally:
        for _, response in opened:
            response.release_conn()
