"""The broker restarted under load, gracefully and by `kill -9`: no id is lost, none doubled
under exactly-once. The replicas keep running: they reconnect, they are not restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import harness
from tests.toxiproxy_fixtures import ProxiedKafka

GUARANTEES = ["at-least-once", "exactly-once"]
# the harness's own waits (minutes, each saying what it waited for) end a stuck scenario first
pytestmark = pytest.mark.timeout(1200)


@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("hard", [False, True], ids=["graceful", "kill-9"])
def test_broker_restart_under_load(
    proxied_kafka: ProxiedKafka,
    tmp_path: Path,
    chaos_table: list[harness.Row],
    guarantee: str,
    hard: bool,
) -> None:
    with harness.chaos_run(
        scenario="broker kill -9 + start" if hard else "broker restart (SIGTERM)",
        guarantee=guarantee,
        bootstrap=proxied_kafka.direct,
        direct=proxied_kafka.direct,
        tmp_path=tmp_path,
        table=chaos_table,
    ) as run:
        run.start(replicas=2)
        run.wait_mid_run()
        with run.injecting():
            proxied_kafka.broker.restart(hard=hard)  # returns once the broker answers again
        run.finish()
