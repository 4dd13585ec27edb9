"""Health, readiness and Prometheus metrics of a replica, and its structured logs."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.runtime import support
from tests.waiting import wait_until


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_health_readiness_metrics_and_log_fields(kafka_bootstrap: str, tmp_path: Path) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"scale": {"class": "apps:Scale"}},
        topics={
            "in": {"consumers": ["scale.in"], "partitions": 2},
            "out": {"producers": ["scale.out"]},
        },
    )
    support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(300, poison={5, 6}))
    with support.replicas(app, tmp_path) as running:
        replica = running.start("scale")
        base = f"http://127.0.0.1:{replica.health_port}"

        def answers(path: str) -> bool:
            try:
                return httpx.get(base + path, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(lambda: answers("/healthz"), timeout=30, what="/healthz")
        wait_until(lambda: answers("/readyz"), timeout=30, what="/readyz")
        support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(298)
        )

        def counted() -> bool:
            text = httpx.get(base + "/metrics", timeout=2).text
            return _metric(text, "streamflow_records_in_total", port="in") >= 300

        wait_until(counted, timeout=30, what="the metrics to count every record")
        text = httpx.get(base + "/metrics", timeout=2).text
        log = running.log()
    assert _metric(text, "streamflow_records_in_total", port="in") == 300
    assert _metric(text, "streamflow_records_out_total", port="out") == 298
    assert _metric(text, "streamflow_records_dlq_total", port="in") == 2
    assert _metric(text, "streamflow_errors_total", port="in", kind="logic") == 2
    assert _metric(text, "streamflow_batch_seconds_count") >= 1
    assert f'app="{app.name}"' in text and 'streamlet="scale"' in text
    lines = [line for line in log.splitlines() if "dead-lettered" in line]
    assert lines and all(
        f"app={app.name}" in line and "streamlet=scale" in line and "replica=0" in line
        for line in lines
    )


def test_kafka_settings_come_from_prefixed_environment_variables() -> None:
    from streamflow.runtime.clients import config_from_env

    env = {
        "STREAMFLOW_KAFKA_BOOTSTRAP": "b:9092",
        "STREAMFLOW_KAFKA_SASL_PASSWORD": "s3cret",
        "STREAMFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "STREAMFLOW_KAFKA_EMPTY": "",
        "STREAMFLOW_KAFKA_LIB": "/opt/kafka/libs",  # the devkit's jars, not a client setting
        "OTHER": "x",
    }
    assert config_from_env(env) == {"sasl.password": "s3cret", "security.protocol": "SASL_SSL"}
