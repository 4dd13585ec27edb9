"""With Kafka gone, a replica says so once, sums it up, says when it is back (issue 38, 1).

Before, each replica's clients logged every reconnect attempt at ERROR: 20,472
lines in four minutes for the wine example. Kafka goes away here behind
Toxiproxy (connections refused, as with a killed broker), under a source and a
processor; the summary interval is 2 s, so the test waits for summaries, never
for a fixed time.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.runtime import support
from tests.toxiproxy_fixtures import ProxiedKafka
from tests.waiting import wait_until

SOURCE = """
from streamflow import Outlet
from streamflow.streamlets.io.generator import Generator


class Readings(Generator):
    out = Outlet("out", "tests.runtime.Reading")
"""


def readyz(port: int) -> dict[str, object]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as error:  # 503: not ready, the body says why
        return dict(json.loads(error.read()))


def test_a_lost_broker_is_told_once_summed_up_and_its_return_told(
    proxied_kafka: ProxiedKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFLOW_OUTAGE_SUMMARY_EVERY", "2")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "outage_app.py").write_text(SOURCE)
    app = support.make_app(
        proxied_kafka.proxied,
        streamlets={
            "source": {"class": "outage_app:Readings", "config": {"rate": 20}},
            "scale": {"class": "apps:Scale"},
        },
        topics={
            "in": {"producers": ["source.out"], "consumers": ["scale.in"]},
            "out": {"producers": ["scale.out"]},
        },
        python_paths=[support.HERE, tmp_path / "code"],
    )
    with support.replicas(app, tmp_path) as running:
        replicas = [running.start("source"), running.start("scale")]
        flowing = support.consume_until(
            proxied_kafka.direct, support.topic(app, "out"), support.count_at_least(20)
        )
        assert len(flowing) >= 20, running.log()
        proxied_kafka.proxy.disable()

        def summaries(name: str) -> int:
            return sum(
                1
                for line in running.lines
                if line.startswith(f"{name}|") and "Kafka unreachable for" in line
            )

        names = [r.name for r in replicas]
        wait_until(
            lambda: all(summaries(n) >= 3 for n in names),
            what="three summaries of the outage from each replica",
            timeout=90,
            explain=running.log,
        )
        for replica in replicas:
            answer = readyz(replica.health_port)
            assert answer["ready"] is False, answer
            assert str(answer["reasons"][0]).startswith("Kafka unreachable since "), answer  # type: ignore[index]
        for name in names:
            mine = [line for line in running.lines if line.startswith(f"{name}|")]
            told = [i for i, line in enumerate(mine) if "Kafka is unreachable:" in line]
            raw = [i for i, line in enumerate(mine) if re.search(r"\b(FAIL|ERROR) \[", line)]
            # ours once, with the cause; librdkafka's own lines: at most the connections it
            # saw drop (one a client) before the first refused attempt, and none after it
            assert len(told) == 1, "\n".join(mine)
            assert len(raw) <= 3 and all(i < told[0] for i in raw), "\n".join(mine)
        proxied_kafka.proxy.enable()

        def back(name: str) -> bool:
            return any(
                line.startswith(f"{name}|") and "Kafka is reachable again" in line
                for line in running.lines
            )

        wait_until(
            lambda: all(back(n) for n in names),
            what="each replica telling that Kafka is back",
            timeout=90,
            explain=running.log,
        )
        wait_until(
            lambda: all(readyz(r.health_port)["ready"] is True for r in replicas),
            what="every replica ready again",
            timeout=60,
        )
