"""The bench load generator against the secured broker: `-X` settings, the password from the env."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from streamflow import devkit

ROOT = Path(__file__).resolve().parents[2]


def test_loadgen_produces_over_sasl_ssl(
    secured_kafka: devkit.SecuredKafkaBroker, secured_topic: Callable[..., str]
) -> None:
    topic = secured_topic("loadgen")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_KAFKA_")}
    env["STREAMFLOW_KAFKA_SASL_PASSWORD"] = secured_kafka.passwords["streamflow"]
    command = [
        sys.executable, "-m", "bench.loadgen", "produce",
        "--bootstrap", secured_kafka.sasl_bootstrap, "--topic", topic,
        "--rate", "200", "--seconds", "1",
        "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512",
        "-X", "sasl.username=streamflow", "-X", f"ssl.ca.location={secured_kafka.ca_file}",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    consumer = Consumer({**secured_kafka.sasl_config(), "group.id": f"count-{topic}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert high - low >= 150  # about 200 records in one second
