"""Toxiproxy fixtures: a proxy server, and a Kafka that clients reach through it.

`proxied_kafka` is a broker of its own (a test may restart or kill it) that
advertises a Toxiproxy proxy: a client bootstrapped at `proxied` stays behind
the proxy for every connection, so the proxy's faults are the client's faults.
`direct` reaches the same broker around the proxy, for set-up and for reading
results while a fault is on. Both are shared by the session; each test gets
them running, the proxy enabled and without toxics.

A missing `toxiproxy-server` fails the test, saying how to build it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from streamflow import devkit
from streamflow.devkit import toxiproxy

PROXY_NAME = "kafka"


@dataclass(frozen=True)
class ProxiedKafka:
    broker: devkit.KafkaBroker
    server: devkit.ToxiproxyServer
    proxy: devkit.Proxy

    @property
    def direct(self) -> str:
        """The broker's own bootstrap address: never behind the proxy."""
        return self.broker.bootstrap_servers

    @property
    def proxied(self) -> str:
        """The proxy's address: clients bootstrapped here stay behind the proxy."""
        return self.proxy.listen


@pytest.fixture(scope="session")
def toxiproxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devkit.ToxiproxyServer]:
    # its log (every connection and toxic) stays in pytest's temporary folder afterwards
    server = devkit.ToxiproxyServer(work_dir=tmp_path_factory.mktemp("toxiproxy"))
    try:
        server.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _proxied_kafka_session(
    toxiproxy_server: devkit.ToxiproxyServer,
) -> Iterator[ProxiedKafka]:
    # The proxy's address must be known before the broker starts (the broker
    # advertises it) and the broker's before the proxy exists (its upstream).
    listen = f"127.0.0.1:{toxiproxy.free_port()}"
    broker = devkit.KafkaBroker(advertised=listen)
    try:
        broker.start()
    except devkit.DevkitError as error:
        pytest.fail(str(error), pytrace=False)
    proxy = toxiproxy_server.create_proxy(
        PROXY_NAME, listen=listen, upstream=broker.proxied_listener
    )
    yield ProxiedKafka(broker=broker, server=toxiproxy_server, proxy=proxy)
    broker.stop()


@pytest.fixture
def proxied_kafka(_proxied_kafka_session: ProxiedKafka) -> ProxiedKafka:
    """The session's proxied broker, running, behind an enabled proxy without toxics."""
    kafka = _proxied_kafka_session
    kafka.server.reset()  # a failed test may have left a toxic or the proxy disabled
    if kafka.broker.is_running:
        kafka.broker.resume()  # a failed test may have left it paused
    else:
        try:
            kafka.broker.start()
        except devkit.DevkitError as error:
            pytest.fail(str(error), pytrace=False)
    return kafka
