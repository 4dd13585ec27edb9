"""Toxiproxy from the devkit: its API, and real faults between Kafka clients and the broker."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

from streamflow import devkit
from streamflow.devkit import DevkitError
from tests.devkit.test_kafka_broker import consume_all
from tests.toxiproxy_fixtures import ProxiedKafka


def test_a_missing_binary_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(DevkitError, match="tools/toxiproxy/build"):
        devkit.find_toxiproxy(bin_dir=tmp_path)


def test_the_api_makes_proxies_toxics_and_partitions(
    toxiproxy_server: devkit.ToxiproxyServer,
) -> None:
    name = f"api-{uuid.uuid4().hex[:8]}"
    proxy = toxiproxy_server.create_proxy(name, upstream="127.0.0.1:9")
    try:
        assert not proxy.listen.endswith(":0"), "the server says which port it took"
        proxy.latency(200, jitter_ms=10)
        proxy.bandwidth(64, stream="upstream")
        proxy.reset_peer(after_ms=100)
        proxy.timeout(0, stream="upstream")
        kinds = {toxic.name: (toxic.type, toxic.attributes) for toxic in proxy.toxics()}
        assert kinds == {
            "latency_downstream": ("latency", {"latency": 200, "jitter": 10}),
            "bandwidth_upstream": ("bandwidth", {"rate": 64}),
            "reset_peer_downstream": ("reset_peer", {"timeout": 100}),
            "timeout_upstream": ("timeout", {"timeout": 0}),
        }
        proxy.remove_toxic("latency_downstream")
        assert "latency_downstream" not in {toxic.name for toxic in proxy.toxics()}

        proxy.disable()
        assert not proxy.enabled
        proxy.clear()
        assert proxy.enabled and proxy.toxics() == []

        with pytest.raises(DevkitError, match="409"):
            toxiproxy_server.create_proxy(name, upstream="127.0.0.1:9")
    finally:
        proxy.delete()
    with pytest.raises(DevkitError, match="404"):
        toxiproxy_server.proxy(name)


def test_clients_bootstrapped_at_the_proxy_stay_behind_it(proxied_kafka: ProxiedKafka) -> None:
    topic = f"proxied-{uuid.uuid4().hex[:8]}"
    devkit.create_topic(bootstrap_servers=proxied_kafka.direct, name=topic)
    producer = Producer({"bootstrap.servers": proxied_kafka.proxied})
    brokers = producer.list_topics(timeout=10).brokers
    assert [str(broker) for broker in brokers.values()] == [f"{proxied_kafka.proxied}/1"], (
        "the broker must advertise the proxy to clients that came through it"
    )

    producer.produce(topic, b"through the proxy")
    assert producer.flush(30) == 0

    assert consume_all(proxied_kafka.proxied, topic, count=1) == [b"through the proxy"]


def test_a_partition_times_out_a_produce_and_healed_it_goes_through(
    proxied_kafka: ProxiedKafka,
) -> None:
    topic = f"partition-{uuid.uuid4().hex[:8]}"
    devkit.create_topic(bootstrap_servers=proxied_kafka.direct, name=topic)
    producer = Producer({"bootstrap.servers": proxied_kafka.proxied, "message.timeout.ms": 3000})
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0

    proxied_kafka.proxy.disable()
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"lost", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(30)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError._MSG_TIMED_OUT

    # the broker itself is fine: a client around the proxy still gets through
    direct = Producer({"bootstrap.servers": proxied_kafka.direct})
    direct.produce(topic, b"around")
    assert direct.flush(30) == 0

    proxied_kafka.proxy.enable()
    producer.produce(topic, b"after")
    assert producer.flush(60) == 0
    assert consume_all(proxied_kafka.direct, topic, count=3) == [b"before", b"around", b"after"]


def test_latency_delays_every_answer_through_the_proxy(proxied_kafka: ProxiedKafka) -> None:
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    devkit.create_topic(bootstrap_servers=proxied_kafka.direct, name=topic)
    producer = Producer({"bootstrap.servers": proxied_kafka.proxied, "linger.ms": 0})
    producer.produce(topic, b"warm-up")  # connections and metadata are made before the toxic
    assert producer.flush(30) == 0

    proxied_kafka.proxy.latency(400)
    acknowledged = threading.Event()

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        assert err is None
        acknowledged.set()

    started = time.monotonic()
    producer.produce(topic, b"slow", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    # a lower bound only: no answer can come back sooner than the proxy lets it
    assert acknowledged.is_set() and time.monotonic() - started >= 0.4
