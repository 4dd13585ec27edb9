"""A dead-letter burst a new writer schema caused, as `status` and the web view show it.

Another team owns the subject of our input topic and left it at NONE, so its
producer can register a schema our streamlet cannot read (``value`` dropped, a
field it needs). Its records are dead-lettered, every one; what a user then
asks is why. `streamflow status` (text and ``-o json``) and the web view's
snapshot name the subject, the version, the schema id and the reason, with a
count that equals the records sent, and the dead-letter topic holds exactly
those records: nothing is lost and nothing is counted twice.

`streamflow run` runs the application on the session's broker and registry
(the real Apicurio); the test waits on what `status` says, never on time.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer
from starlette.testclient import TestClient

from streamflow.operator import backends
from streamflow.operator.web import server
from tests.running import STREAMFLOW, CliRun
from tests.waiting import exited, wait_until

pytestmark = pytest.mark.timeout(420)

SENT = 10
READING: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "writertest",
    "fields": [{"name": "id", "type": "string"}, {"name": "value", "type": "double"}],
}
# what the other team's producer writes: `value` gone, and our reader has no default for it
WITHOUT_VALUE = {**READING, "fields": [{"name": "id", "type": "string"}]}

MODULE = '''\
"""Readings in, readings out."""

from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet


class Pass(Streamlet):
    inp = Inlet("in", "writertest.Reading")
    out = Outlet("out", "writertest.Reading")

    def process(self, record: Record) -> dict[str, Any]:
        return dict(record.value)
'''

BLUEPRINT = """\
name: {app}
kafka:
  register: auto
streamlets:
  pass:
    class: pipeline:Pass
topics:
  {app}-in:
    format: avro-registry
    consumers: [pass.in]
  {app}-out:
    format: avro-registry
    producers: [pass.out]
"""


def make_project(root: Path) -> tuple[Path, str]:
    app = f"writers-{uuid.uuid4().hex[:8]}"
    (root / "schemas").mkdir(parents=True)
    (root / "schemas" / "reading.avsc").write_text(json.dumps(READING))
    (root / "pipeline.py").write_text(MODULE)
    blueprint = root / "blueprint.yaml"
    blueprint.write_text(BLUEPRINT.format(app=app))
    return blueprint, app


def env_for(home: Path) -> dict[str, str]:
    drop = ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL", "FORCE_COLOR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(STREAMFLOW_HOME=str(home), NO_COLOR="1", COLUMNS="250")
    return env


def someone_elses_subject(registry: SchemaRegistryClient, subject: str) -> None:
    """The other team's subject: our schema in it, and a level that protects nobody."""
    registry.register_schema(subject, Schema(json.dumps(READING), "AVRO"))
    registry.set_compatibility(subject_name=subject, level="NONE")


def register_theirs(registry: SchemaRegistryClient, subject: str) -> tuple[int, int]:
    """Their new schema, which the registry takes at NONE: its (version, schema id)."""
    theirs = Schema(json.dumps(WITHOUT_VALUE), "AVRO")
    schema_id = int(registry.register_schema(subject, theirs))
    version = registry.lookup_schema(subject, theirs).version
    assert version is not None
    return int(version), schema_id


def send_theirs(bootstrap: str, topic: str, schema_id: int) -> None:
    """What their producer writes: the registry's wire format, with their schema's id."""
    parsed = parse_schema(WITHOUT_VALUE)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(SENT):
        body = io.BytesIO()
        schemaless_writer(body, parsed, {"id": f"r{n}"})
        producer.produce(topic, b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue())
    assert producer.flush(30) == 0


def dead_letters(bootstrap: str, topic: str) -> list[dict[str, str]]:
    """Every record of the dead-letter topic (one partition), its headers decoded."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        found: list[dict[str, str]] = []
        while len(found) < high - low:
            msg = consumer.poll(5)
            if msg is None or msg.error() is not None:
                continue
            headers: dict[str, Any] = dict(msg.headers() or [])
            found.append({k: (v or b"").decode() for k, v in headers.items()})
        return found
    finally:
        consumer.close()


def test_status_and_the_web_view_name_the_writer_schema_behind_a_dead_letter_burst(
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    blueprint, app = make_project(tmp_path / "project")
    home = tmp_path / "home"
    env = env_for(home)
    registry = schema_registry_client
    subject = f"{app}-in-value"
    someone_elses_subject(registry, subject)  # `run` refuses to start on what it cannot read

    def status(*fmt: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(STREAMFLOW), "status", app, *fmt],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def streamlet() -> dict[str, Any] | None:
        answer = status("-o", "json")
        if answer.returncode != 0:
            return None
        [found] = json.loads(answer.stdout)["streamlets"]
        return found  # type: ignore[no-any-return]

    def ready() -> bool:
        found = streamlet()
        return found is not None and found["ready"] == found["desired"] == 1

    def burst() -> dict[str, Any] | None:
        found = streamlet()
        entries = found["writer_schemas"] if found is not None else []
        return entries[0] if entries and entries[0]["count"] >= SENT else None

    with CliRun(
        ["run", str(blueprint), "-b", kafka_bootstrap, "--registry", schema_registry_url],
        env=env,
        log_file=tmp_path / "run.log",
        cwd=blueprint.parent,
    ) as run:
        wait_until(
            ready,
            what="pass to be ready",
            timeout=180,
            interval=1.0,
            explain=lambda: run.log()[-4000:],
            gave_up=exited(run.process, "streamflow run"),
        )
        version, schema_id = register_theirs(registry, subject)
        send_theirs(kafka_bootstrap, f"{app}-in", schema_id)
        found = wait_until(
            burst,
            what=f"status to count {SENT} dead letters of schema id {schema_id}",
            timeout=120,
            interval=1.0,
            explain=lambda: run.log()[-4000:],
            gave_up=exited(run.process, "streamflow run"),
        )
        assert found is not None
        assert found["count"] == SENT, found
        assert (found["subject"], found["version"], found["schema_id"]) == (
            subject,
            version,
            schema_id,
        )
        assert found["port"] == "in"
        assert found["writer"] == "writertest.Reading"
        assert "'value' has no default and the writer does not write it" in found["reason"]

        text = status()
        assert text.returncode == 0, text.stderr
        line = next((x for x in text.stdout.splitlines() if "dead letters" in x), "")
        assert re.sub(r"\s+", " ", line) == (
            f"pass.in dead letters: {SENT} from a new writer schema: version {version} of "
            f"{subject} (id {schema_id}): cannot read: {found['reason']}"
        ), text.stdout

        # the web view's snapshot of the application, as the page reads it
        target = backends.get_target("local", home=home)
        with TestClient(
            server.create_app(target, interval=0.5), base_url="http://127.0.0.1"
        ) as client:
            snapshot = client.get(f"/api/apps/{app}")
        assert snapshot.status_code == 200, snapshot.text
        [card] = snapshot.json()["streamlets"]
        [shown] = card["dead_letters"]["writer_schemas"]
        assert {k: shown[k] for k in found} == found
        assert shown["text"] == line.split("dead letters: ", 1)[1]
        assert card["dead_letters"]["count"] == SENT
        run.interrupt(timeout=90)

    # nothing lost, nothing counted twice: the dead-letter topic holds exactly those records
    letters = dead_letters(kafka_bootstrap, f"{app}.pass.dlq")
    assert len(letters) == SENT
    assert all(
        f"version {version} of subject {subject}, schema id {schema_id}" in d["streamflow-error"]
        for d in letters
    ), letters[0]
