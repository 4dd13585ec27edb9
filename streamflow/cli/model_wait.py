"""Waiting for every replica to serve a pushed model, and showing what each one said.

``model push`` produces a descriptor and then reads the streamlet's status
topic from where it ended before the push, so only reports about this push
count. Each replica says ``loading`` and then ``serving``, ``failed`` or
``rejected``; the wait shows how many serve so far and what the others said
(:mod:`streamflow.cli.progress`), and ends with an error naming each replica
that does not serve the version, and why, or that never answered.

How many replicas to wait for is asked of the deployment, again every few
seconds while waiting: an autoscaler runs more or fewer than the spec's
``replicas`` (only its starting count), and may change its mind meanwhile.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from rich.table import Table

from streamflow.blueprint.model import Application
from streamflow.cli import output, progress
from streamflow.runtime.clients import KafkaClients
from streamflow.schema.codecs import Codec, DecodeError
from streamflow.schema.models import FINAL_STATES, ModelState

__all__ = [
    "STATUS",
    "Awaited",
    "await_status",
    "check_served",
    "consumer",
    "print_status_table",
]

STATUS = "streamflow.ml.ModelStatus"
_RECOUNT_S = 2.0  # how often the number of replicas running is asked again


def consumer(clients: KafkaClients) -> Consumer:
    """A reader configured as the application's replicas are (TLS, SASL), committing nothing."""
    return clients.reader(client_id="streamflow-cli")


@dataclasses.dataclass(frozen=True)
class Awaited:
    """What ``push`` waits for: ``streamlet`` to serve ``model:version`` within ``timeout``."""

    streamlet: str
    model: str
    version: int
    timeout: float
    machine_output: bool = False
    quiet: bool = False


def await_status(
    app: Application,
    awaited: Awaited,
    clients: KafkaClients,
    topic: str,
    start: dict[int, int],
    codec: Codec,
    *,
    replicas: Callable[[], int],
) -> dict[str, dict[str, Any]]:
    """The final status of each replica for the version; the latest word of each meanwhile.

    ``codec``: the status topic's, for its format. ``replicas``: how many run
    now (asked again while waiting, as it may change).
    """
    count, counted = replicas(), time.monotonic()
    final: dict[str, dict[str, Any]] = {}
    states: dict[str, str] = {}  # replica -> the latest state it reported for this version
    reader = consumer(clients)
    reader.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    deadline = time.monotonic() + awaited.timeout
    try:
        with progress.waiting(
            f"waiting for {awaited.streamlet} to serve {awaited.model}:{awaited.version}",
            detail=_served(states, count),
            separator=" — ",
            machine_output=awaited.machine_output,
            quiet=awaited.quiet,
        ) as wait:
            while not _all_final(final, awaited.streamlet, count) and time.monotonic() < deadline:
                for msg in reader.consume(100, 0.5):
                    if msg.error() is not None or msg.value() is None:
                        continue
                    try:
                        record = codec.decode(msg.value())  # type: ignore[arg-type]
                    except DecodeError:
                        continue  # not a status (the topic is the streamlet's own): not ours
                    if record["model"] == awaited.model and record["version"] == awaited.version:
                        states[record["replica"]] = record["state"]
                        if record["state"] in FINAL_STATES:
                            final[record["replica"]] = record
                if time.monotonic() - counted >= _RECOUNT_S or _all_final(
                    final, awaited.streamlet, count
                ):  # before ending, make sure no replica was added meanwhile
                    count, counted = replicas(), time.monotonic()
                wait.update(_served(states, count))
            if count == 0:
                wait.done(
                    f"{awaited.streamlet} runs no replica now (scaled to zero); each one it"
                    f" starts loads {awaited.model}:{awaited.version}"
                )
            elif _all_final(final, awaited.streamlet, count) and all(
                final[r]["state"] == ModelState.SERVING for r in _expected(awaited.streamlet, count)
            ):
                wait.done(
                    f"{awaited.streamlet} serves {awaited.model}:{awaited.version}"
                    f" on {count}/{count} replicas"
                )
    finally:
        reader.close()
    for replica in _expected(awaited.streamlet, count):
        if replica not in final:
            final[replica] = {
                "replica": replica,
                "model": awaited.model,
                "version": awaited.version,
                "state": states.get(replica, "no report"),
                "message": f"no final report within {awaited.timeout:g}s",
                "time": None,
            }
    return final


def _all_final(final: dict[str, dict[str, Any]], streamlet: str, count: int) -> bool:
    return all(replica in final for replica in _expected(streamlet, count))


def _served(states: dict[str, str], replicas: int) -> str:
    """``1/2 replicas, classifier-1 loading``: how many serve, and what the others said."""
    serving = sum(state == ModelState.SERVING for state in states.values())
    others = [f"{r} {state}" for r, state in sorted(states.items()) if state != ModelState.SERVING]
    return ", ".join([f"{serving}/{replicas} replicas", *others])


def _expected(streamlet: str, replicas: int) -> list[str]:
    """The replicas' names as they report them (``classifier-0``, ...)."""
    return [f"{streamlet}-{index}" for index in range(replicas)]


def check_served(statuses: dict[str, dict[str, Any]], awaited: Awaited, app: Application) -> None:
    """Exit 1, naming each replica that does not serve the version, and why."""
    missing = [
        f"{replica} ({s['state']}: {s['message']})" if s["message"] else f"{replica} ({s['state']})"
        for replica, s in sorted(statuses.items())
        if s["state"] != ModelState.SERVING
    ]
    if missing:
        output.fail(
            f"{awaited.model}:{awaited.version} is not served by every replica of "
            f"{awaited.streamlet}: " + ", ".join(missing),
            hint=f"see `streamflow model status {app.name} {awaited.streamlet}`"
            f" and `streamflow logs {app.name} {awaited.streamlet}`",
        )


def print_status_table(statuses: dict[str, dict[str, Any]]) -> None:
    table = Table("replica", "model", "version", "state", "message", "time")
    colours = {
        ModelState.SERVING: "green",
        ModelState.FAILED: "red",
        ModelState.REJECTED: "red",
        ModelState.LOADING: "yellow",
    }
    for replica, s in sorted(statuses.items()):
        state = s["state"]
        when = s["time"].strftime("%H:%M:%S") if isinstance(s["time"], dt.datetime) else "-"
        message = s["message"] + (f" (then {s['last_event']})" if s.get("last_event") else "")
        table.add_row(
            replica,
            s["model"],
            str(s["version"]),
            f"[{colours.get(state, 'white')}]{state}[/]",
            message,
            when,
        )
    output.console().print(table)
