"""Network faults between the replicas and the broker, through Toxiproxy: latency, a slow
link, connections reset, a 30 s partition. The replicas reach the broker only through the
proxy (the broker advertises it); the input producer and the reader go around it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamflow import devkit
from tests.chaos import harness
from tests.toxiproxy_fixtures import ProxiedKafka

GUARANTEES = ["at-least-once", "exactly-once"]
# the harness's own waits (minutes, each saying what it waited for) end a stuck scenario first
pytestmark = pytest.mark.timeout(1200)


def _latency(proxy: devkit.Proxy) -> None:
    proxy.latency(200, stream="downstream")
    proxy.latency(200, stream="upstream")


def _bandwidth(proxy: devkit.Proxy) -> None:
    proxy.bandwidth(32, stream="downstream")
    proxy.bandwidth(32, stream="upstream")


def _reset_peer(proxy: devkit.Proxy) -> None:
    proxy.reset_peer(after_ms=0, stream="upstream")


def _partition(proxy: devkit.Proxy) -> None:
    proxy.disable()


# (name, how the fault is made, how long it stays on); proxy.clear() ends every one
FAULTS: list[tuple[str, Callable[[devkit.Proxy], None], float]] = [
    ("latency 200 ms each way, 5 s", _latency, 5.0),
    ("bandwidth 32 KB/s each way, 5 s", _bandwidth, 5.0),
    ("connections reset, 5 s", _reset_peer, 5.0),
    ("partition (proxy disabled), 30 s", _partition, 30.0),
]


@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize(
    ("scenario", "make_fault", "seconds"),
    FAULTS,
    ids=["latency", "bandwidth", "reset", "partition"],
)
def test_network_fault_between_replicas_and_broker(
    proxied_kafka: ProxiedKafka,
    tmp_path: Path,
    chaos_table: list[harness.Row],
    guarantee: str,
    scenario: str,
    make_fault: Callable[[devkit.Proxy], None],
    seconds: float,
) -> None:
    with harness.chaos_run(
        scenario=scenario,
        guarantee=guarantee,
        bootstrap=proxied_kafka.proxied,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
    ) as run:
        run.start(replicas=2)
        run.wait_mid_run()
        with run.injecting():
            make_fault(proxied_kafka.proxy)
            time.sleep(seconds)  # the fault's length: what is measured comes after it
            proxied_kafka.proxy.clear()
        run.finish()
