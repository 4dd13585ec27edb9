"""The real node runs pods for real: containers start, log, exec, and reach the network.

Each test checks something kwok's fake nodes cannot do: a container's output
coming back through `kubectl logs`, a command run with `kubectl exec`, the
`kubernetes` Service reaching the apiserver from inside a pod (what an
in-cluster client uses), a listener on this host reached from a pod (what a
Kafka broker started by the tests will be), a Service's ClusterIP reaching
another pod, and a Deployment's deleted pod replaced by a new container.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamflow import devkit
from tests.waiting import wait_until

_WAIT_S = 90.0
_POLL_S = 0.25  # each poll runs kubectl


def pod(name: str, script: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A busybox pod running `script`; it exits at once on SIGTERM, so deletions are quick."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": pod_spec(script),
    }


def pod_spec(script: str) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 2,
        "restartPolicy": "Always",
        "containers": [
            {
                "name": "main",
                "image": devkit.TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", f"trap 'exit 0' TERM; {script}"],
            }
        ],
    }


class Namespace:
    """kubectl on the real node's cluster, in a namespace of the test's own."""

    def __init__(self, node: devkit.RealNode, name: str) -> None:
        self.node = node
        self.name = name

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.node.kubectl("-n", self.name, *args, input=input).stdout

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.kubectl("get", kind, name, "-o=json"))
        return result

    def running(self, name: str) -> bool:
        """Whether the pod's container runs (a real one: it has a container ID)."""
        statuses = self.get("pod", name)["status"].get("containerStatuses", [])
        return bool(statuses) and "running" in statuses[0]["state"] and statuses[0]["ready"]

    def wait_running(self, name: str) -> None:
        wait_until(
            lambda: self.running(name),
            what=f"pod {self.name}/{name} to run",
            timeout=_WAIT_S,
            interval=_POLL_S,
        )

    def logs_contain(self, name: str, text: str) -> None:
        """Wait for `text` in the pod's logs (which fail until its container has started)."""

        def logged() -> bool:
            result = self.node.kubectl("-n", self.name, "logs", name, check=False)
            return result.returncode == 0 and text in result.stdout

        wait_until(logged, what=f"{text!r} in {name}'s logs", timeout=_WAIT_S, interval=_POLL_S)


@pytest.fixture
def ns(real_node: devkit.RealNode) -> Iterator[Namespace]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    real_node.kubectl("create", "namespace", name)
    # Pods need the ServiceAccount (the controller-manager makes it) to be admitted.
    wait_until(
        lambda: real_node.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        what=f"the default ServiceAccount of {name}",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )
    yield Namespace(real_node, name)
    real_node.kubectl("delete", "namespace", name, "--wait=false")


def test_the_node_is_real_and_ready(real_node: devkit.RealNode) -> None:
    node = json.loads(real_node.kubectl("get", "node", real_node.name, "-o=json").stdout)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.host_address


def test_a_pod_runs_and_its_logs_and_exec_work(ns: Namespace) -> None:
    marker = f"hello-{uuid.uuid4().hex[:8]}"
    ns.apply(pod("greeter", f"echo {marker}; sleep 3600 & wait"))
    ns.wait_running("greeter")

    ns.logs_contain("greeter", marker)
    assert ns.kubectl("exec", "greeter", "--", "cat", "/etc/hostname").strip() == "greeter"
    status = ns.get("pod", "greeter")["status"]
    assert status["podIP"] in devkit_subnet(ns.node)
    assert status["containerStatuses"][0]["containerID"].startswith("containerd://")


def devkit_subnet(node: devkit.RealNode) -> list[str]:
    prefix = node.pod_subnet.rsplit(".", 1)[0]
    return [f"{prefix}.{host}" for host in range(2, 255)]


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(
    ns: Namespace, real_node: devkit.RealNode
) -> None:
    script = (
        'until nc -w 3 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" </dev/null; '
        "do sleep 1; done; echo connected; "
        "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; "
        "sleep 3600 & wait"
    )
    ns.apply(pod("client", script))
    ns.logs_contain("client", "connected")
    ns.logs_contain("client", "token")

    # What an in-cluster client then does over that address: TLS against the
    # cluster's CA (the certificate must name the ClusterIP) and a token.
    cluster_ip = real_node.kubectl(
        "get", "service", "kubernetes", "-n", "default", "-o=jsonpath={.spec.clusterIP}"
    ).stdout.strip()
    token = real_node.kubectl("create", "token", "default", "-n", ns.name).stdout.strip()
    assert b'"gitVersion"' in https_get(cluster_ip, "/version", token, ca=cluster_ca(real_node))


def cluster_ca(node: devkit.RealNode) -> Path:
    template = "{.clusters[0].cluster.certificate-authority}"
    path = node.kubectl("config", "view", "--raw", f"-o=jsonpath={template}").stdout.strip()
    return Path(path)


def https_get(host: str, path: str, token: str, *, ca: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, 443), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        tls.sendall((request + "Connection: close\r\n\r\n").encode())
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def host_listener(real_node: devkit.RealNode) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on the node's host address that greets each client and keeps what it sends."""
    server = socket.create_server((real_node.host_address, 0))
    server.settimeout(0.5)
    received: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            with client:
                client.settimeout(5)
                client.sendall(b"hello-from-host\n")
                try:
                    received.append(client.recv(1024))
                except OSError:
                    received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    done.set()
    thread.join()
    server.close()


def test_a_pod_reaches_a_listener_on_the_host(
    ns: Namespace, real_node: devkit.RealNode, host_listener: tuple[int, list[bytes]]
) -> None:
    port, received = host_listener
    target = f"{real_node.host_address} {port}"
    ns.apply(pod("caller", f"echo from-pod | nc -w 5 {target}; sleep 3600 & wait"))
    ns.logs_contain("caller", "hello-from-host")
    wait_until(
        lambda: b"from-pod\n" in received,
        what="the pod's line at the host",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )


def test_a_service_cluster_ip_reaches_a_pod_on_the_node(ns: Namespace) -> None:
    ns.apply(pod("web", "mkdir /www; echo served-by-web > /www/index.html; "
                        "httpd -f -p 8080 -h /www & wait", labels={"app": "web"}))  # fmt: skip
    ns.kubectl("expose", "pod", "web", "--port=80", "--target-port=8080")
    ns.wait_running("web")
    cluster_ip = ns.get("service", "web")["spec"]["clusterIP"]
    ns.apply(pod("browser", f"until wget -q -O- http://{cluster_ip}/; do sleep 1; done; "
                            "sleep 3600 & wait"))  # fmt: skip
    ns.logs_contain("browser", "served-by-web")


def test_a_deleted_pod_of_a_deployment_is_replaced_by_a_new_container(ns: Namespace) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "worker"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "worker"}},
            "template": {
                "metadata": {"labels": {"app": "worker"}},
                "spec": pod_spec("echo started; sleep 3600 & wait"),
            },
        },
    }
    ns.apply(deployment)

    def running_pods() -> dict[str, str]:
        """Running pod name -> its container's ID."""
        listing = json.loads(ns.kubectl("get", "pods", "-l", "app=worker", "-o=json"))
        return {
            item["metadata"]["name"]: statuses[0]["containerID"]
            for item in listing["items"]
            if "deletionTimestamp" not in item["metadata"]
            and (statuses := item["status"].get("containerStatuses"))
            and "running" in statuses[0]["state"]
        }

    wait_until(
        lambda: len(running_pods()) == 1,
        what="the worker pod to run",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )
    [(victim, container)] = running_pods().items()
    ns.kubectl("delete", "pod", victim, "--wait=false")

    def replaced() -> bool:
        pods = running_pods()
        return len(pods) == 1 and victim not in pods and container not in pods.values()

    wait_until(
        replaced,
        what=f"a new running container replacing pod {victim}",
        timeout=_WAIT_S,
        interval=_POLL_S,
    )
    [replacement] = running_pods()
    ns.logs_contain(replacement, "started")


def test_an_imported_archive_runs_under_the_name_given(
    ns: Namespace, real_node: devkit.RealNode
) -> None:
    renamed = f"localhost/streamflow-test/renamed:{uuid.uuid4().hex[:8]}"
    real_node.import_image(devkit.find_node_images() / "busybox.oci.tar", name=renamed)
    manifest = pod("renamed", "echo renamed-runs; sleep 3600 & wait")
    manifest["spec"]["containers"][0]["image"] = renamed
    ns.apply(manifest)
    ns.logs_contain("renamed", "renamed-runs")
