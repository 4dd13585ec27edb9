"""``streamflow tail`` on topics in every format, written by clients that are not streamflow.

Records on a topic in a registry format or plain JSON carry neither the
``streamflow-schema`` header nor a single-object fingerprint: other clients
write them (here confluent-kafka's own serializers and a plain producer), so
tail must read them with the codec of the topic's ports. Each test writes a
small project (a schema, a processor, a blueprint) with fresh topic and app
names, produces records itself, and runs the console script in a process.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer

from tests.runtime.registry_support import value_context

STREAMFLOW = Path(sys.executable).with_name("streamflow")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECORD_LINE = re.compile(r"^(\d+)@(\d+) key=(\S+) (.*)$")
# subjects as streamflow names them (<topic>-value), without asking the registry first
TOPIC_STRATEGY = {"subject.name.strategy": topic_subject_name_strategy}

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "tailtest",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": "string", "default": "C"},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "value": {"type": "number"},
        "unit": {"type": "string"},
    },
    "required": ["id", "value"],
}

MODULE = """\
from typing import Any

from streamflow import Inlet, Outlet, Record, Streamlet


class Copy(Streamlet):
    inp = Inlet("in", "tailtest.Reading")
    out = Outlet("out", "tailtest.Reading")

    def process(self, record: Record) -> dict[str, Any]:
        return record.value
"""

BLUEPRINT = """\
name: {app}
streamlets:
  copy:
    class: tailmod:Copy
    dlq: {dlq}
topics:
  {source}:
    consumers: [copy.in]
    format: {fmt}
  {sink}:
    producers: [copy.out]
    format: {fmt}
"""


@dataclass
class Project:
    root: Path
    app: str
    source: str
    sink: str
    dlq: str
    bootstrap: str

    def tail(self, topic: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {
            k: v
            for k, v in os.environ.items()
            if k not in ("STREAMFLOW_KAFKA_BOOTSTRAP", "STREAMFLOW_SCHEMA_REGISTRY_URL")
        }
        environ.update(STREAMFLOW_HOME=str(self.root / "home"), NO_COLOR="1", COLUMNS="250", **env)
        args = ("-b", self.bootstrap, *args)
        return subprocess.run(
            [str(STREAMFLOW), "tail", str(self.root / "blueprint.yaml"), topic, *args],
            cwd=self.root,
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def make_project(
    root: Path, topic_factory: Callable[..., str], bootstrap: str, fmt: str
) -> Project:
    suffix = uuid.uuid4().hex[:8]
    project = Project(
        root=root,
        app=f"tailfmt-{suffix}",
        source=topic_factory("tail-src"),
        sink=topic_factory("tail-out"),
        dlq=topic_factory("tail-dlq"),
        bootstrap=bootstrap,
    )
    (root / "schemas").mkdir()
    (root / "schemas" / "reading.avsc").write_text(json.dumps(SCHEMA))
    (root / "tailmod.py").write_text(MODULE)
    (root / "blueprint.yaml").write_text(
        BLUEPRINT.format(
            app=project.app, source=project.source, sink=project.sink, dlq=project.dlq, fmt=fmt
        )
    )
    return project


def produce(
    bootstrap: str, topic: str, items: list[tuple[str, bytes, list[tuple[str, bytes]]]]
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in items:
        producer.produce(topic, value, key.encode(), headers=headers)
    assert producer.flush(30) == 0


def readings(n: int) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "value": i / 4, "unit": "K"} for i in range(n)]


def records(result: subprocess.CompletedProcess[str]) -> list[re.Match[str]]:
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [ANSI.sub("", line) for line in result.stdout.splitlines()]
    return [m for line in lines if (m := RECORD_LINE.match(line))]


# -- plain JSON: no registry ----------------------------------------------------------------


def test_tail_reads_a_json_topic_with_the_ports_schema(
    tmp_path: Path, topic_factory: Callable[..., str], kafka_bootstrap: str
) -> None:
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "json")
    values = readings(3)
    written = [
        (v["id"], json.dumps({"id": v["id"], "value": v["value"]}).encode(), []) for v in values
    ]
    written.append(("bad", b"{not json", []))
    produce(kafka_bootstrap, project.source, written)

    as_json = project.tail(project.source, "-n", "4", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    shown = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["key"] for r in shown] == ["r0", "r1", "r2", "bad"]
    for record, value in zip(shown[:3], values, strict=True):
        assert record["schema"] == "tailtest.Reading"
        assert record["value"] == {**value, "unit": "C"}  # the schema's default filled in
        assert record["schema_id"] is None and "raw" not in record
    bad = shown[3]
    assert bad["value"] is None and bad["decode_error"].startswith("not valid JSON")
    assert base64.b64decode(bad["raw"]) == b"{not json"

    text = records(project.tail(project.source, "-n", "4"))
    assert [m.group(3) for m in text] == ["r0", "r1", "r2", "bad"]
    assert json.loads(text[0].group(4)) == {"id": "r0", "value": 0.0, "unit": "C"}
    assert text[3].group(4).startswith("<undecodable: not valid JSON")
    assert "schema id" not in as_json.stdout + "".join(m.group(0) for m in text)


def test_tail_reads_a_dead_letter_in_the_format_of_its_source_topic(
    tmp_path: Path, topic_factory: Callable[..., str], kafka_bootstrap: str
) -> None:
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "json")
    failed = json.dumps({"id": "r7", "value": 1.5}).encode()  # decoded fine, then the code failed

    def letter(error: str, kind: str) -> list[tuple[str, bytes]]:
        return [
            ("streamflow-error", error.encode()),
            ("streamflow-error-type", kind.encode()),
            ("streamflow-source-topic", project.source.encode()),
            ("streamflow-source-partition", b"0"),
            ("streamflow-source-offset", b"7"),
        ]

    produce(
        kafka_bootstrap,
        project.dlq,
        [
            ("r7", failed, letter("division by zero", "ZeroDivisionError")),
            ("junk", b"\x00\x01garbage", letter("not valid JSON", "DecodeError")),
        ],
    )
    shown = project.tail(project.dlq, "-n", "2", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    processing, garbage = (json.loads(line) for line in shown.stdout.splitlines())
    assert processing["value"] == {"id": "r7", "value": 1.5, "unit": "C"}
    assert processing["headers"]["streamflow-error-type"] == "ZeroDivisionError"
    assert garbage["value"] is None and garbage["decode_error"].startswith("not valid JSON")
    assert garbage["headers"]["streamflow-source-topic"] == project.source
    assert base64.b64decode(garbage["raw"]) == b"\x00\x01garbage"

    text = project.tail(project.dlq, "-n", "2")
    lines = records(text)
    assert json.loads(lines[0].group(4))["id"] == "r7"
    assert lines[1].group(4).startswith("<undecodable: not valid JSON")
    assert text.stdout.count("'streamflow-error-type'") == 2  # the error headers, as before


# -- registry formats -------------------------------------------------------------------------


def test_tail_shows_registry_records_decoded_with_their_schema_id(
    tmp_path: Path,
    topic_factory: Callable[..., str],
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
) -> None:
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "avro-registry")
    serializer = AvroSerializer(schema_registry_client, json.dumps(SCHEMA), conf=TOPIC_STRATEGY)
    context = value_context(project.source)
    values = readings(3)
    framed = [serializer(v, context) for v in values]
    assert framed[0] is not None and framed[0][0] == 0  # the Confluent wire format, not ours
    schema_id = int.from_bytes(framed[0][1:5], "big")
    unknown = b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x02"
    items = [(v["id"], f, []) for v, f in zip(values, framed, strict=True) if f is not None]
    produce(kafka_bootstrap, project.source, [*items, ("lost", unknown, [])])

    as_json = project.tail(
        project.source, "-n", "4", "-o", "json", STREAMFLOW_SCHEMA_REGISTRY_URL=schema_registry_url
    )
    assert as_json.returncode == 0, as_json.stderr
    shown = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["key"] for r in shown] == ["r0", "r1", "r2", "lost"]
    for record, value in zip(shown[:3], values, strict=True):
        assert record["value"] == value
        assert record["schema"] == "tailtest.Reading" and record["schema_id"] == schema_id
    lost = shown[3]
    assert lost["value"] is None and lost["schema_id"] == 2**31 - 7
    assert f"schema id {2**31 - 7} is not in the registry" in lost["decode_error"]

    # the registry named by --registry, as by the environment
    text = project.tail(project.source, "-n", "4", "--registry", schema_registry_url)
    lines = records(text)
    assert [m.group(4).startswith(f"schema id {schema_id} {{") for m in lines[:3]] == [True] * 3
    assert json.loads(lines[0].group(4).removeprefix(f"schema id {schema_id} ")) == values[0]
    assert lines[3].group(4).startswith(f"schema id {2**31 - 7} <undecodable: ")
    assert "Traceback" not in text.stderr


def test_tail_shows_json_registry_records_and_registry_dead_letters(
    tmp_path: Path,
    topic_factory: Callable[..., str],
    kafka_bootstrap: str,
    schema_registry_url: str,
    schema_registry_client: SchemaRegistryClient,
) -> None:
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "json-registry")
    serializer = JSONSerializer(
        json.dumps(JSON_SCHEMA), schema_registry_client, conf=TOPIC_STRATEGY
    )
    context = value_context(project.source)
    value = {"id": "r1", "value": 2.5, "unit": "F"}
    framed = serializer(value, context)
    assert framed is not None and framed[0] == 0
    schema_id = int.from_bytes(framed[1:5], "big")
    produce(kafka_bootstrap, project.source, [("r1", framed, [])])
    headers = [
        ("streamflow-error", b"boom"),
        ("streamflow-error-type", b"RuntimeError"),
        ("streamflow-source-topic", project.source.encode()),
    ]
    produce(kafka_bootstrap, project.dlq, [("r1", framed, headers), ("junk", b"junk", headers)])
    env = {"STREAMFLOW_SCHEMA_REGISTRY_URL": schema_registry_url}

    shown = project.tail(project.source, "-n", "1", "-o", "json", **env)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert (record["value"], record["schema_id"]) == (value, schema_id)

    letters = project.tail(project.dlq, "-n", "2", "-o", "json", **env)
    assert letters.returncode == 0, letters.stderr
    decoded, junk = (json.loads(line) for line in letters.stdout.splitlines())
    assert (decoded["value"], decoded["schema_id"]) == (value, schema_id)
    assert decoded["headers"]["streamflow-error"] == "boom"
    assert junk["value"] is None and junk["schema_id"] is None
    assert "not in the schema registry wire format" in junk["decode_error"]
    assert junk["headers"]["streamflow-error-type"] == "RuntimeError"


def test_tail_of_a_registry_topic_without_a_registry_says_how_to_name_one(
    tmp_path: Path, topic_factory: Callable[..., str], kafka_bootstrap: str
) -> None:
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "avro-registry")
    result = project.tail(project.source, "-n", "1")
    output = " ".join(result.stderr.split())
    assert result.returncode == 1, result.stdout + output
    assert f"cannot decode {project.source} (avro-registry)" in output
    assert "no schema registry is configured" in output and "--registry" in output
    assert "Traceback" not in output and result.stdout == ""


def test_tail_follow_prints_each_record_as_it_comes_into_a_pipe(
    tmp_path: Path, topic_factory: Callable[..., str], kafka_bootstrap: str
) -> None:
    """`streamflow tail -f -o json | jq` shows records as they come, not when a pipe's
    buffer happens to fill (the process never ends, so it never would)."""
    project = make_project(tmp_path, topic_factory, kafka_bootstrap, "json")
    produce(kafka_bootstrap, project.source, [("r0", b'{"id": "r0", "value": 1}', [])])
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    environ.update(STREAMFLOW_HOME=str(tmp_path / "home"), NO_COLOR="1")
    command = [str(STREAMFLOW), "tail", str(project.root / "blueprint.yaml"), project.source,
               "-f", "-o", "json", "-b", kafka_bootstrap]  # fmt: skip
    follower = subprocess.Popen(command, cwd=project.root, env=environ, stdout=subprocess.PIPE)
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout or []])
    reader.start()
    try:
        assert json.loads(lines.get(timeout=60))["key"] == "r0"
        produce(kafka_bootstrap, project.source, [("r1", b'{"id": "r1", "value": 2}', [])])
        assert json.loads(lines.get(timeout=60))["key"] == "r1"
        assert follower.poll() is None, "still following"
    finally:
        follower.terminate()
        follower.wait(timeout=30)
        reader.join(timeout=30)
