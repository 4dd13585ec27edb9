"""Each local replica's health port: never given twice, and moved when another process
holds it. A port picked free is not reserved: the kernel may hand it out again, which once
left a replica of ``streamflow run`` failing to start, restart after restart (a clean-clone
CI run: two replicas told the same port)."""

from __future__ import annotations

import itertools
import socket
import sys
from collections.abc import Iterator

import pytest

from streamflow.operator.local import processes
from streamflow.operator.local.processes import ProcessGroup, ReplicaProcess
from tests.waiting import wait_until

# What a replica does with its port: listen there, or exit 1 when it cannot, as
# `streamflow streamlet run` does ("OSError: [Errno 98] Address already in use").
_LISTENER = """
import socket, sys, time
port = int(sys.argv[sys.argv.index("--health-port") + 1])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    sock.bind(("127.0.0.1", port))
except OSError as exc:
    print(f"replica failed: {exc}", flush=True)
    sys.exit(1)
sock.listen()
while True:
    time.sleep(60)
"""


def _replica(port: int, index: int = 0) -> ReplicaProcess:
    return ReplicaProcess(
        streamlet="classifier",
        replica=index,
        health_port=port,
        command=[sys.executable, "-c", _LISTENER, "--health-port", str(port)],
    )


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def group() -> Iterator[tuple[ProcessGroup, list[str]]]:
    events: list[str] = []
    replicas = ProcessGroup(on_event=events.append, liveness_every=3600)
    yield replicas, events
    replicas.stop(timeout=10)


def test_a_replica_whose_port_another_process_holds_restarts_on_a_free_one(
    group: tuple[ProcessGroup, list[str]],
) -> None:
    replicas, events = group
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        replica = _replica(taken)
        replicas.add(replica)

        def serving() -> bool:
            replicas.supervise_once()
            moved = replica.health_port != taken  # the squatter answers on `taken`
            return moved and replica.running and _listens(replica.health_port)

        wait_until(serving, timeout=60, what=f"the replica listening elsewhere than {taken}")
        assert replica.restarts >= 1 and replica.running
        assert replica.command[replica.command.index("--health-port") + 1] == str(
            replica.health_port
        )
        assert any(
            f"classifier-0: port {taken} is taken by another process" in e
            and f"move to port {replica.health_port}" in e
            for e in events
        ), events


def test_a_replica_that_exits_keeps_its_port_when_nobody_else_holds_it(
    group: tuple[ProcessGroup, list[str]],
) -> None:
    """Moving is for a port held by someone else: a replica that simply exited keeps the
    address its metrics are scraped at."""
    replicas, events = group
    port = replicas.free_port()
    replica = _replica(port)
    replicas.add(replica)
    wait_until(lambda: _listens(port), timeout=30, what=f"the replica listening on {port}")
    replica.process.kill()  # type: ignore[union-attr]
    replica.process.wait()  # type: ignore[union-attr]

    def back() -> bool:
        replicas.supervise_once()
        return replica.restarts >= 1 and _listens(port)

    wait_until(back, timeout=60, what=f"the replica back on {port}")
    assert replica.health_port == port
    assert not [e for e in events if "is taken" in e], events


def test_no_two_replicas_of_a_group_are_given_the_same_port(
    group: tuple[ProcessGroup, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's pick may repeat itself, as it did for two replicas in CI."""
    replicas, _ = group
    first = second = processes._kernel_pick()
    while second == first:
        second = processes._kernel_pick()
    picks = itertools.chain([first, first, first, second], itertools.repeat(second))
    monkeypatch.setattr(processes, "_kernel_pick", lambda: next(picks))
    monkeypatch.setattr(processes, "_recent", {})
    port = replicas.free_port()
    replicas.add(_replica(port, index=0))
    assert port == first
    assert replicas.free_port() == second  # not `first` again, though the kernel said so


def test_a_port_handed_out_lately_is_not_handed_out_again_by_another_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two applications of one supervisor start replicas moments apart: a port given to
    the first is not yet listened on, and the kernel may pick it again for the second."""
    first = second = processes._kernel_pick()
    while second == first:
        second = processes._kernel_pick()
    picks = itertools.chain([first, first, second], itertools.repeat(second))
    monkeypatch.setattr(processes, "_kernel_pick", lambda: next(picks))
    monkeypatch.setattr(processes, "_recent", {})
    assert ProcessGroup().free_port() == first
    assert ProcessGroup().free_port() == second
