"""What creating a StreamflowApplication may not do: take Secrets, weaken TLS, run any image.

Issue 10, finding 14, on the real test control plane with the operator running:

* a resource that names a Secret not labelled ``streamflow.io/kafka-credentials=true``
  is refused (phase Failed, the message says why), and the operator sends
  nothing anywhere: the bootstrap the resource names (a listener of this test,
  standing in for an attacker's broker) never sees a connection;
* with a labelled Secret, the Secret's ``BOOTSTRAP`` wins over the resource's;
* security settings in ``spec.kafka.config`` are refused, naming the key;
* with ``--allowed-images``, an image outside the list is refused.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from streamflow.blueprint.model import Application, KafkaSpec
from streamflow.operator.kubernetes import names, spec
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.support import (
    POLL_S,
    TEST_IMAGE,
    WAIT_S,
    OperatorThread,
    get_json,
    make_application,
)
from tests.waiting import wait_until

LABEL = "streamflow.io/kafka-credentials"


class Listener:
    """A TCP port that records who connects: the 'attacker's broker'."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def apply(kubectl: Kubectl, namespace: str, app: Application, *, image: str | None = None) -> str:
    pods = spec.PodSettings(image=image or TEST_IMAGE)
    kubectl("apply", "-f", "-", input=json.dumps(spec.body(app, namespace=namespace, pods=pods)))
    return names.resource_name(app.name)


def with_kafka(app: Application, **kafka: Any) -> Application:
    return dataclasses.replace(app, kafka=dataclasses.replace(app.kafka, **kafka))


def secret(kubectl: Kubectl, namespace: str, name: str, *, labelled: bool, **data: str) -> None:
    literals = [f"--from-literal={key}={value}" for key, value in data.items()]
    kubectl("create", "secret", "generic", name, "-n", namespace, *literals)
    if labelled:
        kubectl("label", "secret", name, "-n", namespace, f"{LABEL}=true")


def failed_with(kubectl: Kubectl, namespace: str, name: str) -> Callable[[], str]:
    def message() -> str:
        status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
        return str(status.get("message") or "") if status.get("phase") == "Failed" else ""

    return message


def deployments(kubectl: Kubectl, namespace: str) -> list[str]:
    found = get_json(kubectl, "deployments", "-n", namespace)["items"]
    return [d["metadata"]["name"] for d in found]


def test_an_unlabelled_secret_is_refused_and_nothing_is_sent(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    listener: Listener,
) -> None:
    secret(
        kubectl, namespace, "db-creds", labelled=False,
        SASL_USERNAME="admin", SASL_PASSWORD="hunter2", SECURITY_PROTOCOL="SASL_PLAINTEXT",
        SASL_MECHANISM="PLAIN",
    )  # fmt: skip
    start_operator()
    app = with_kafka(application, bootstrap=listener.address, secret="db-creds")
    name = apply(kubectl, namespace, app)
    message = wait_until(
        failed_with(kubectl, namespace, name), what="the refusal", timeout=WAIT_S, interval=POLL_S
    )
    assert "db-creds" in message and LABEL in message
    assert "hunter2" not in message
    events = kubectl("get", "events", "-n", namespace, "-o=json")
    assert "db-creds" in events and "hunter2" not in events
    assert deployments(kubectl, namespace) == []  # no pod would mount it either
    assert listener.connections == 0


def test_a_labelled_secrets_bootstrap_wins_over_the_resources(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    listener: Listener,
    kafka_bootstrap: str,
) -> None:
    secret(kubectl, namespace, "kafka-creds", labelled=True, BOOTSTRAP=kafka_bootstrap)
    start_operator()
    app = with_kafka(application, bootstrap=listener.address, secret="kafka-creds")
    name = apply(kubectl, namespace, app)

    def topics_ready() -> bool:
        status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
        return any(
            c["type"] == "TopicsReady" and c["status"] == "True"
            for c in status.get("conditions") or []
        )

    wait_until(
        topics_ready,
        what="the topics, created through the Secret's bootstrap",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert set(app.topics) <= set(admin.list_topics(timeout=10).topics)
    assert listener.connections == 0


def test_a_secret_holding_the_registrys_credentials_still_serves_the_operators_clients(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    kafka_bootstrap: str,
) -> None:
    """SCHEMA_REGISTRY_USER_INFO is documented for this Secret; the operator's own Kafka
    clients used to fail on it (``No such configuration property``)."""
    secret(
        kubectl,
        namespace,
        "kafka-and-registry",
        labelled=True,
        BOOTSTRAP=kafka_bootstrap,
        SCHEMA_REGISTRY_USER_INFO="bob:pw",
    )
    start_operator()
    app = with_kafka(application, bootstrap=kafka_bootstrap, secret="kafka-and-registry")
    name = apply(kubectl, namespace, app)

    def topics_ready() -> bool:
        status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
        assert status.get("phase") != "Failed", status
        return any(
            c["type"] == "TopicsReady" and c["status"] == "True"
            for c in status.get("conditions") or []
        )

    wait_until(topics_ready, what="the topics", timeout=WAIT_S, interval=POLL_S)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert set(app.topics) <= set(admin.list_topics(timeout=10).topics)


def test_a_secret_without_a_bootstrap_is_refused(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    listener: Listener,
) -> None:
    secret(kubectl, namespace, "no-bootstrap", labelled=True, SASL_PASSWORD="hunter2")
    start_operator()
    app = with_kafka(application, bootstrap=listener.address, secret="no-bootstrap")
    name = apply(kubectl, namespace, app)
    message = wait_until(
        failed_with(kubectl, namespace, name), what="the refusal", timeout=WAIT_S, interval=POLL_S
    )
    assert "BOOTSTRAP" in message
    assert listener.connections == 0


@pytest.mark.parametrize(
    "key",
    [
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
        "security.protocol",
        "sasl.kerberos.kinit.cmd",
        "plugin.library.paths",
        "bootstrap.servers",
    ],
)
def test_security_settings_in_the_resources_kafka_config_are_refused(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    listener: Listener,
    key: str,
) -> None:
    start_operator()
    value = {"security.protocol": "PLAINTEXT", "bootstrap.servers": listener.address}.get(key, "x")
    app = with_kafka(application, config={key: value})
    name = apply(kubectl, namespace, app)
    message = wait_until(
        failed_with(kubectl, namespace, name), what="the refusal", timeout=WAIT_S, interval=POLL_S
    )
    assert key in message
    assert deployments(kubectl, namespace) == []
    assert listener.connections == 0


def test_an_image_outside_the_allowed_images_is_refused(
    kubectl: Kubectl,
    namespace: str,
    start_operator: Callable[..., OperatorThread],
    application: Application,
    kafka_bootstrap: str,
) -> None:
    start_operator(allowed_images=["registry.internal/streamflow", "ghcr.io/acme/*"])
    evil = make_application(bootstrap=kafka_bootstrap)
    refused = apply(kubectl, namespace, evil, image="registry.internal/streamflow-miner:1")
    allowed = apply(kubectl, namespace, application, image="registry.internal/streamflow:1.2")
    message = wait_until(
        failed_with(kubectl, namespace, refused),
        what="the refusal",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert "registry.internal/streamflow-miner:1" in message and "allowed" in message
    wait_until(
        lambda: any(d.startswith(f"{allowed}-") for d in deployments(kubectl, namespace)),
        what="the allowed image's Deployments",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    assert not any(d.startswith(f"{refused}-") for d in deployments(kubectl, namespace))


def test_the_resource_is_equivalent_to_creating_pods_says_the_readme() -> None:
    from pathlib import Path

    root = Path(__file__).parents[3]
    for readme in (root / "README.md", root / "operator" / "README.md"):
        text = " ".join(readme.read_text().split())
        assert "equivalent to creating pods" in text, readme
        assert LABEL in text, readme


def test_kafka_spec_is_what_the_tests_change() -> None:
    assert {f.name for f in dataclasses.fields(KafkaSpec)} >= {"bootstrap", "secret", "config"}
