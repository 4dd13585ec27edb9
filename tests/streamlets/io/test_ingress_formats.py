"""The HTTP and file ingresses and the file egress honour each topic's format.

They write and read through the runtime's bindings like any streamlet, so a
`json` topic gets plain JSON, an `avro-registry` or `json-registry` topic the
Confluent framing (byte 0, the schema id, the body) that confluent-kafka's own
deserializers read. Each test runs `streamflow run` as a user does (the console
script, `-b` and `--registry`), waits on conditions, stops it with Ctrl-C and
counts what is on the topics and in the files: nothing lost, nothing extra.
The streamlets are the end-to-end ones of `tests/streamlets/io_kafka`.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from streamflow import devkit
from streamflow.schema.registry import schema_id_of
from tests.running import CliRun
from tests.runtime.registry_support import value_context
from tests.streamlets.io_kafka import iohelpers as h

EVENT_AVSC = (h.SCHEMAS / "event.avsc").read_text()
LISTENING = re.compile(r"^(\w+)-0\s*\|.*listening on http://\S+:(\d+)", re.M)


class Run(CliRun):
    """`streamflow run` of a blueprint, with `-b` and `--registry`; its output goes to a file."""

    def __init__(self, blueprint: Path, bootstrap: str, registry_url: str) -> None:
        root = blueprint.parent
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFLOW_")}
        env.update(STREAMFLOW_HOME=str(root / "home"), NO_COLOR="1", COLUMNS="250")
        args = ["run", str(blueprint), "-b", bootstrap, "--registry", registry_url]
        super().__init__(args, env=env, log_file=root / "run.log", cwd=root)

    def ports(self) -> dict[str, int]:
        """The port each HTTP ingress logged as bound, by streamlet."""
        return {name: int(port) for name, port in LISTENING.findall(self.log())}


@pytest.fixture
def running(
    tmp_path: Path, kafka_bootstrap: str, schema_registry_url: str
) -> Iterator[Callable[[str], Run]]:
    """`running(blueprint_text)` writes the blueprint and starts `streamflow run` on it."""
    runs: list[Run] = []

    def start(text: str) -> Run:
        blueprint = tmp_path / "blueprint.yaml"
        blueprint.write_text(text)
        runs.append(Run(blueprint, kafka_bootstrap, schema_registry_url))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


def suffix() -> str:
    return uuid.uuid4().hex[:8]


def blueprint(app: str, streamlets: str, topics: str) -> str:
    return (
        f"name: {app}\nschemas: [{h.SCHEMAS}]\npython_paths: [{h.HERE}]\n"
        f"streamlets:\n{streamlets}topics:\n{topics}"
    )


def as_event(decoded: dict[str, Any]) -> dict[str, Any]:
    """A decoded Event with its uuid as the string it was posted as."""
    return {**decoded, "id": str(decoded["id"])}


def by_seq(records: list[Message]) -> dict[int, Message]:
    return {int(json.loads(m.value()[5:])["seq"]): m for m in records}


# -- the HTTP ingress ------------------------------------------------------------------------


def test_the_http_ingress_writes_each_topic_in_its_format_and_nothing_of_a_bad_body(
    running: Callable[[str], Run],
    kafka_bootstrap: str,
    schema_registry_client: SchemaRegistryClient,
) -> None:
    s = suffix()
    plain, framed = f"plain-{s}", f"framed-{s}"
    http = "    class: ioapps:EventHttp\n    config: {host: 127.0.0.1, port: 0, key_field: id}\n"
    run = running(
        blueprint(
            f"iofmt-{s}",
            f"  plain:\n{http}  framed:\n{http}",
            f"  {plain}: {{producers: [plain.out], format: json}}\n"
            f"  {framed}: {{producers: [framed.out], format: avro-registry, register: auto}}\n",
        )
    )
    run.wait(
        lambda _: set(run.ports()) == {"plain", "framed"},
        what="both ingresses to listen",
        timeout=120,
    )
    urls = {name: f"http://127.0.0.1:{port}/records" for name, port in run.ports().items()}
    good = [h.event(i) for i in range(50)]
    with httpx.Client(timeout=60) as client:
        for url in urls.values():
            accepted = client.post(url, json=good)
            assert accepted.status_code == 202, accepted.text
            assert accepted.json() == {"accepted": 50}

            # a batch is all or nothing: one item without its id refuses the lot
            batch = client.post(url, json=[h.event(50), {"seq": 51}])
            assert batch.status_code == 400, batch.text
            assert batch.json()["error"] == "invalid-records"
            assert [(p["index"], p["field"]) for p in batch.json()["problems"]] == [(1, "id")]
            wrong = client.post(url, json={**h.event(52), "seq": "fifty-two"})
            assert wrong.status_code == 400, wrong.text
            assert [p["field"] for p in wrong.json()["problems"]] == ["seq"]
            broken = client.post(
                url, content=b'{"id": ', headers={"content-type": "application/json"}
            )
            assert broken.status_code == 400, broken.text
            assert broken.json()["error"] == "malformed-json"

            # answered after Kafka has it, and after every bad body was answered:
            # read to their ends now, the topics hold all that was ever written to them
            last = client.post(url, json=h.event(60))
            assert last.status_code == 202, last.text
    log = run.interrupt()

    expected = {e["id"]: e for e in [*good, h.event(60)]}
    records = h.read_topic(kafka_bootstrap, plain)
    assert len(records) == len(expected), log
    for message in records:
        assert message.value().startswith(b"{"), message.value()  # plain JSON, nothing before
        assert json.loads(message.value()) == expected[message.key().decode()]

    records = h.read_topic(kafka_bootstrap, framed)
    assert len(records) == len(expected), log
    registered = schema_registry_client.get_latest_version(f"{framed}-value")
    assert registered.schema.schema_type == "AVRO"
    deserialize = AvroDeserializer(schema_registry_client)
    for message in records:
        assert message.value()[0] == 0
        assert schema_id_of(message.value()) == registered.schema_id
        decoded = deserialize(message.value(), value_context(framed))
        assert as_event(decoded) == expected[message.key().decode()]
    assert "Traceback" not in log, log


# -- the file ingress and egress -------------------------------------------------------------

N = 400


def test_the_file_ingress_writes_json_registry_and_the_file_egress_reads_registry_topics(
    running: Callable[[str], Run],
    kafka_bootstrap: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    s = suffix()
    events, archived = f"events-{s}", f"archived-{s}"
    feed = tmp_path / "feed.jsonl"
    feed.write_text("".join(json.dumps(h.event(i)) + "\n" for i in range(N)))
    # another team's producer: confluent-kafka's AvroSerializer, registering as it goes
    devkit.create_topic(bootstrap_servers=kafka_bootstrap, name=archived)
    serialize = AvroSerializer(schema_registry_client, EVENT_AVSC)
    h.produce(
        kafka_bootstrap,
        archived,
        [(str(i), serialize(h.event(i), value_context(archived))) for i in range(N)],
    )
    copied, kept = tmp_path / "events-out.jsonl", tmp_path / "archived-out.jsonl"
    run = running(
        blueprint(
            f"iofmt-{s}",
            f"  feed:\n    class: ioapps:EventFile\n    config: {{path: {feed}, key_field: id}}\n"
            f"  copy:\n    class: ioapps:EventSink\n    config: {{path: {copied}}}\n"
            f"  keep:\n    class: ioapps:EventSink\n    config: {{path: {kept}}}\n",
            f"  {events}:\n    producers: [feed.out]\n    consumers: [copy.in]\n"
            "    format: json-registry\n    register: auto\n"
            f"  {archived}: {{consumers: [keep.in], format: avro-registry}}\n",
        )
    )
    run.wait(
        lambda _: len(h.jsonl(copied)) >= N and len(h.jsonl(kept)) >= N,
        what=f"{N} records in each output file",
        timeout=120,
    )
    log = run.interrupt()

    expected = [h.event(i) for i in range(N)]
    for path in (copied, kept):  # every record, once, as it went in
        assert sorted(h.jsonl(path), key=lambda e: e["seq"]) == expected, (path, log)

    records = h.read_topic(kafka_bootstrap, events)
    assert len(records) == N, log
    registered = schema_registry_client.get_latest_version(f"{events}-value")
    assert registered.schema.schema_type == "JSON"
    assert {schema_id_of(m.value()) for m in records} == {registered.schema_id}
    written = by_seq(records)
    assert sorted(written) == list(range(N))
    for seq, message in written.items():
        assert json.loads(message.value()[5:]) == expected[seq]
        assert message.key().decode() == expected[seq]["id"]
    assert "Traceback" not in log, log
