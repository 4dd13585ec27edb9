"""SIGTERM with the broker gone: every replica ends within its bound and says what it lost.

Issue 38, finding 3: with the broker killed, the processors of the wine example
stopped within a second, but the source never did (it flushed its producer for
30 s, and an exactly-once one sat in a transactional call for a minute), so
`streamflow run` killed it at the end of its grace with nothing said. Here each
kind of replica runs against a broker of its own (`kafka_broker`): records are
flowing, the broker is killed (`kill -9`), records wait for it, and the replica
is stopped the way the supervisor stops one (SIGTERM, then SIGKILL after the
grace it is given). The grace given is the replica's bound (its flush timeout
plus the close margin) and a little more: a replica still running then is
killed, and the test fails. Its last line must say how many records Kafka did
not get.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamflow import devkit
from streamflow.operator.local import ReplicaProcess
from streamflow.runtime import shutdown
from tests.runtime import support
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

BOUND_S = shutdown.bound_s(shutdown.FLUSH_TIMEOUT_S)  # what the replica says it keeps to
MARGIN_S = 3.0  # the process's own exit after its last line, and the supervisor's poll
LOST = re.compile(r"stopped: (\d+) records? (?:were|was) not delivered \(Kafka unreachable\)")
# what a replica that gave up a transaction says, when Kafka had acknowledged all its records
ABORTED = re.compile(r"stopped: its open transaction (?:was|could not be) aborted")


def metric(replica: ReplicaProcess, name: str) -> float:
    """The sum of a replica's samples of ``name`` (0 before the first)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{replica.health_port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    found = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return sum(float(value) for value in found)


def lines_of(running: support.Replicas, replica: ReplicaProcess) -> list[str]:
    prefix = f"{replica.name}| "
    return [line[len(prefix) :] for line in list(running.lines) if line.startswith(prefix)]


def message(line: str) -> str:
    """A log line's message: without its time and level, and without its fields."""
    return re.sub(r"^\S+ +[A-Z]+ +", "", line).split("  app=")[0]


Step = Callable[["Kind", ReplicaProcess, support.Replicas], None]


def _outputs_read(kind: Kind, replica: ReplicaProcess, running: support.Replicas) -> None:
    """Until a reader finds the replica's records in its topic."""
    found = support.consume_until(kind.bootstrap, kind.out, support.count_at_least(20), timeout=60)
    assert len(found) >= 20, running.log()


def _written(records: int) -> Step:
    """Until the replica has written ``records`` more since the kill: they wait in its
    producer (a ``serve()`` waits for each emit's answer, so it writes one at a time)."""

    def step(kind: Kind, replica: ReplicaProcess, running: support.Replicas) -> None:
        at_kill = metric(replica, "streamflow_records_out_total")
        wait_until(
            lambda: metric(replica, "streamflow_records_out_total") >= at_kill + records,
            what=f"{records} records written after the broker was killed",
            timeout=30,
            explain=running.log,
        )

    return step


def _listening(kind: Kind, replica: ReplicaProcess, running: support.Replicas) -> None:
    """Until the ingress listens, and takes a record (202: it is in Kafka)."""
    kind.port = wait_until(
        lambda: next(
            (
                int(m.group(1))
                for line in lines_of(running, replica)
                if (m := re.search(r"listening on http://\S+:(\d+)", line))
            ),
            None,
        ),
        what="the ingress to log its port",
        timeout=30,
        explain=running.log,
    )
    assert _post(kind.port, 0).status_code == 202, running.log()


def _posted(kind: Kind, replica: ReplicaProcess, running: support.Replicas) -> None:
    """A request whose record waits for the broker: its answer comes when the replica stops."""

    def request() -> None:
        try:
            kind.answers.append(_post(kind.port, 1))
        except httpx.HTTPError as exc:
            kind.answers.append(exc)

    threading.Thread(target=request, daemon=True).start()
    wait_until(
        lambda: metric(replica, "streamflow_records_out_total") >= 2,
        what="the posted record handed to the producer",
        timeout=30,
        explain=running.log,
    )


def _post(port: int, seq: int) -> httpx.Response:
    reading = {"id": f"r{seq}", "seq": seq, "value": float(seq), "poison": False}
    return httpx.post(f"http://127.0.0.1:{port}/records", json=[reading], timeout=60)


@dataclass
class Kind:
    """One kind of replica: its streamlet, and the steps before and after the kill."""

    streamlet: dict[str, Any]
    inputs: int = 0  # readings written to its input before it starts
    flowing: Step = _outputs_read  # until records flow through it
    strand: Step = lambda *_: None  # after the kill: until records wait for the broker
    bootstrap: str = ""
    out: str = ""
    port: int = 0
    answers: list[httpx.Response | BaseException] = field(default_factory=list)


KINDS = {
    "processor": Kind({"class": "stop_apps:PacedScale"}, inputs=200_000, strand=_written(5)),
    # transactions: what it holds is the transaction open when the broker died (the
    # next one waits for its commit)
    "processor exactly-once": Kind(
        {"class": "apps:Scale", "guarantee": "exactly-once"}, inputs=200_000
    ),
    "source": Kind({"class": "stop_apps:Paced"}, strand=_written(5)),
    "source exactly-once": Kind({"class": "stop_apps:Paced", "guarantee": "exactly-once"}),
    "http ingress": Kind(
        {"class": "stop_apps:ReadingsOverHttp", "config": {"port": 0}},
        flowing=_listening,
        strand=_posted,
    ),
    "serve()": Kind({"class": "stop_apps:Pushes"}, strand=_written(1)),
}


def _last_lines(running: support.Replicas, replica: ReplicaProcess) -> None:
    """Give the reader of a replica that has exited up to 5 s to take its last line."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not any(
        message(line).startswith("stopped: ") for line in lines_of(running, replica)
    ):
        time.sleep(0.1)  # a polling interval, not a synchronisation


@pytest.mark.parametrize("name", list(KINDS))
def test_sigterm_with_the_broker_gone_ends_the_replica_within_its_bound(
    kafka_broker: devkit.KafkaBroker, tmp_path: Path, name: str
) -> None:
    kind = replace(KINDS[name], answers=[])
    kind.bootstrap = kafka_broker.bootstrap_servers
    topics: dict[str, dict[str, Any]] = {"out": {"producers": ["it.out"], "partitions": 2}}
    if kind.inputs:
        topics["in"] = {"consumers": ["it.in"], "partitions": 2}
    app = support.make_app(kind.bootstrap, streamlets={"it": kind.streamlet}, topics=topics)
    kind.out = support.topic(app, "out")
    if kind.inputs:
        support.produce(kind.bootstrap, support.topic(app, "in"), support.readings(kind.inputs))
    with support.replicas(app, tmp_path) as running:
        replica = running.start("it")
        kind.flowing(kind, replica, running)
        kafka_broker.kill()
        kind.strand(kind, replica, running)
        started = time.monotonic()
        # as the supervisor stops it: SIGTERM, and SIGKILL past the grace given
        running.group.remove(replica.name, timeout=BOUND_S + MARGIN_S)
        took = time.monotonic() - started
        assert replica.process is not None
        code = replica.process.returncode
        if code != 0:  # its last lines first: the stop watch's report says where its loop was
            _last_lines(running, replica)
        assert code == 0, (
            f"the replica {'was killed' if code == -signal.SIGKILL else f'exited {code}'} "
            f"{took:.1f}s after SIGTERM (its bound: {BOUND_S:g}s)\n{running.log()}"
        )
        last = wait_until(
            lambda: (
                (mine := lines_of(running, replica))
                and (said := message(mine[-1])).startswith("stopped: ")
                and said
            ),
            what="its last line to say what was not delivered",
            timeout=10,
            explain=lambda: "\n".join(lines_of(running, replica)[-15:]),
        )
    lost = LOST.match(last)
    if name == "processor exactly-once":
        # the broker may have died between acknowledging all of the transaction's records
        # and its commit: none is lost then, and the transaction is aborted all the same
        assert lost is not None or ABORTED.match(last), last
    else:
        assert lost is not None and int(lost.group(1)) > 0, last
    if "exactly-once" in name:
        assert "transaction was aborted" in last or "transaction could not be" in last, last
    if kind.flowing is _listening:  # its sender was answered, not left hanging or cut off
        [answer] = wait_until(lambda: kind.answers, what="the answer to the request", timeout=10)
        assert isinstance(answer, httpx.Response) and answer.status_code == 503, answer
