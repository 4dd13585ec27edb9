"""The Kubernetes operator creating an application's topics on the secured broker.

The credentials (SASL_SSL user, password and CA) live only in a Secret labelled
`streamflow.io/kafka-credentials=true` that the resource names; the resource's
own `kafka.config` carries no security setting. The operator's AdminClient must
use the Secret's settings: the topics then exist on the secured broker, which
they could not otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from confluent_kafka.admin import AdminClient

from streamflow import devkit
from tests.k8s_fixtures import Kubectl
from tests.operator.k8s.conftest import crd, namespace, start_operator  # noqa: F401
from tests.operator.k8s.support import POLL_S, WAIT_S, OperatorThread, get_json, make_application
from tests.operator.k8s.test_k8s_trust import apply, secret
from tests.waiting import wait_until


def test_the_operator_creates_topics_with_a_labelled_secrets_sasl_credentials(
    kubectl: Kubectl,
    namespace: str,  # noqa: F811
    start_operator: Callable[..., OperatorThread],  # noqa: F811
    secured_kafka: devkit.SecuredKafkaBroker,
) -> None:
    app = make_application(bootstrap=secured_kafka.sasl_bootstrap)
    app = dataclasses.replace(
        app, kafka=dataclasses.replace(app.kafka, config={}, secret="kafka-sasl")
    )
    secret(
        kubectl,
        namespace,
        "kafka-sasl",
        labelled=True,
        BOOTSTRAP=secured_kafka.sasl_bootstrap,
        SECURITY_PROTOCOL="SASL_SSL",
        SASL_MECHANISM="SCRAM-SHA-512",
        SASL_USERNAME="streamflow",
        SASL_PASSWORD=secured_kafka.passwords["streamflow"],
        SSL_CA_LOCATION=str(secured_kafka.ca_file),
    )
    start_operator()
    name = apply(kubectl, namespace, app)

    def topics_ready() -> str:
        status = get_json(kubectl, "sfapp", name, "-n", namespace).get("status") or {}
        for condition in status.get("conditions") or []:
            if condition["type"] == "TopicsReady" and condition["status"] == "True":
                return str(condition.get("message"))
        return ""

    wait_until(
        topics_ready,
        what="the topics, created with the Secret's SASL_SSL credentials",
        timeout=WAIT_S,
        interval=POLL_S,
    )
    admin = AdminClient(secured_kafka.admin_config())
    assert set(app.topics) <= set(admin.list_topics(timeout=10).topics)
