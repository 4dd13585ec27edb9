"""Topic formats in the verifier: the fields, a registry's configuration, and its subjects.

The subject checks run against the session's real schema registry, through
`streamflow verify --registry` where the user would meet them.
"""

from __future__ import annotations

import json
import socket
import textwrap
import uuid
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from typer.testing import CliRunner, Result

from streamflow.blueprint import verify_file
from streamflow.cli.main import app as cli
from streamflow.runtime.registry import ConfluentRegistry
from streamflow.schema.formats import TopicFormat
from tests.blueprint.bp_helpers import FIXTURES, only, verify, where

STREAMLETS = """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
  sink:
    class: bp_fixture_streamlets:Sink
topics:
"""
# Lines 1-8 are STREAMLETS; the topics a test appends start on line 9.
READING = json.loads((FIXTURES / "schemas" / "Reading.avsc").read_text())


def test_an_unknown_format_lists_the_formats_and_hints_at_the_closest() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out]\n    format: avro-registy\n"
    )
    problem = only(result, "unknown-format")
    assert where(problem) == (11, 13)
    assert problem.hint == "did you mean `avro-registry`?"
    for name in ("avro", "avro-registry", "json-registry", "json"):
        assert name in problem.message
    assert result.application is None


def test_a_format_that_is_not_a_string_is_unknown() -> None:
    result = verify(STREAMLETS + "  readings:\n    producers: [source.out]\n    format: [avro]\n")
    problem = only(result, "unknown-format")
    assert where(problem) == (11, 13)
    assert "got a list" in problem.message


def test_an_invalid_register_policy_on_a_topic_and_on_kafka() -> None:
    text = STREAMLETS.replace(
        "streamlets:\n",
        "kafka:\n  schema_registry: http://registry.invalid\n  register: always\nstreamlets:\n",
    )
    # the kafka block adds three lines: the topic starts on line 12
    result = verify(
        text + "  readings:\n    producers: [source.out]\n"
        "    format: avro-registry\n    register: sometimes\n"
    )
    problems = sorted(
        (p for p in result.problems if p.code == "invalid-register"), key=lambda p: p.position.line
    )
    assert [where(p) for p in problems] == [(5, 13), (15, 15)], result.problems
    assert "register must be one of auto, never" in problems[0].message
    assert "'always'" in problems[0].message
    assert result.application is None


def test_a_registry_format_without_a_registry_is_reported_at_the_format() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out]\n    consumers: [sink.in]\n"
        "    partitions: 2\n    format: json-registry\n"
    )
    problem = only(result, "registry-not-configured")
    assert where(problem) == (13, 13)
    assert "readings" in problem.message and "json-registry" in problem.message
    assert "--registry" in problem.hint and "kafka.schema_registry" in problem.hint
    assert result.application is None


def test_registry_formats_with_a_configured_registry_are_valid() -> None:
    text = STREAMLETS.replace(
        "streamlets:\n", "kafka:\n  schema_registry: http://registry.invalid:8081\nstreamlets:\n"
    )
    result = verify(
        text + "  readings:\n    producers: [source.out]\n    consumers: [sink.in]\n"
        "    format: avro-registry\n    register: auto\n"
    )
    assert result.problems == []
    assert result.application is not None
    topic = result.application.topics["readings"]
    assert topic.format is TopicFormat.AVRO_REGISTRY
    assert str(result.application.register_policy(topic)) == "auto"


CLASSES = {"source": "Source", "sink": "Sink", "relay": "Relay"}


def write_blueprint(directory: Path, topics: str, *, kafka: str = "") -> Path:
    """A blueprint of the fixture streamlets that ``topics`` uses, with absolute paths."""
    topics = textwrap.dedent(topics)
    streamlets = "".join(
        f"  {name}:\n    class: bp_fixture_streamlets:{cls}\n"
        for name, cls in CLASSES.items()
        if f"{name}." in topics
    )
    path = directory / f"bp-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(
        f"name: app\nschemas: [{FIXTURES / 'schemas'}]\npython_paths: [{FIXTURES}]\n"
        + kafka
        + f"streamlets:\n{streamlets}topics:\n"
        + textwrap.indent(topics, "  ")
    )
    return path


def position(path: Path, line_text: str, value: str) -> str:
    """``file:line:col`` of ``value`` on the line that starts (indented) with ``line_text``."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip().startswith(line_text):
            return f"{path}:{number}:{line.index(value) + 1}"
    raise AssertionError(f"{line_text!r} is not in {path}")


def invoke(*args: object) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_graph_shows_each_topics_format_without_a_registry(tmp_path: Path) -> None:
    path = write_blueprint(
        tmp_path,
        """\
        readings:
          producers: [source.out]
          consumers: [relay.in]
          format: avro-registry
        relayed:
          producers: [relay.out]
          consumers: [sink.in]
          format: json-registry
        """,
    )
    result = invoke("graph", path)
    assert result.exit_code == 0, result.output
    assert "source.out ─[tests.fixtures.Reading as avro-registry]─▶ readings" in result.stdout
    assert "relayed ─[tests.fixtures.Reading as json-registry]─▶ sink.in" in result.stdout
    # the default format is not repeated on every edge
    plain = write_blueprint(tmp_path, "readings:\n  producers: [source.out]\n")
    assert " as avro" not in invoke("graph", plain).stdout


# -- against a real registry -------------------------------------------------------------


def unique_topic() -> str:
    return f"readings-{uuid.uuid4().hex[:10]}"


def register(
    client: SchemaRegistryClient, subject: str, doc: dict[str, object], *, level: str = "BACKWARD"
) -> int:
    client.set_compatibility(subject_name=subject, level=level)
    return int(client.register_schema(subject, Schema(json.dumps(doc), "AVRO")))


def clashing_reading() -> dict[str, object]:
    """A `tests.fixtures.Reading` whose `value` is a string: neither side reads the other."""
    fields = [{"name": "id", "type": "string"}, {"name": "value", "type": "string"}]
    return {**READING, "fields": fields}


def test_verify_refuses_a_producer_the_subjects_compatibility_rule_refuses(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = unique_topic()
    register(schema_registry_client, f"{topic}-value", clashing_reading())
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          producers: [source.out]
          format: avro-registry
          register: auto
        """,
    )
    result = invoke("verify", path, "--registry", schema_registry_url)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    error = next(line for line in lines if "error[incompatible-schema]" in line)
    at = position(path, "producers:", "source.out")
    assert error.startswith(f"{at}: error[incompatible-schema]: topic {topic}: "), error
    assert "source.out writes tests.fixtures.Reading" in error
    assert f"subject {topic}-value" in error
    assert lines[-1] == "✗ app: 1 error"


def test_verify_refuses_a_consumer_that_cannot_read_the_subjects_latest_version(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = unique_topic()
    first = register(schema_registry_client, f"{topic}-value", READING)
    # BACKWARD lets the owner drop `value` (new readers ignore it); our sink needs it
    without_value = {**READING, "fields": [{"name": "id", "type": "string"}]}
    latest = register(schema_registry_client, f"{topic}-value", without_value)
    assert latest != first
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          consumers: [sink.in]
          format: avro-registry
        """,
    )
    result = verify_file(path, registry=ConfluentRegistry(schema_registry_url))
    problem = only(result, "incompatible-schema")
    at = position(path, "consumers:", "sink.in")
    assert f"{path}:{problem.position.line}:{problem.position.column}" == at
    assert "sink.in reads tests.fixtures.Reading, which cannot read version 2 of subject" in (
        problem.message
    )
    assert f"id {latest})" in problem.message
    assert "value" in problem.message

    cli_result = invoke("verify", path, "--registry", schema_registry_url)
    assert cli_result.exit_code == 1
    assert f"{at}: error[incompatible-schema]" in cli_result.stdout


def test_verify_finds_a_schema_its_owner_registered_as_written(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = unique_topic()
    older = {**READING, "fields": [{"name": "id", "type": "string"}]}
    register(schema_registry_client, f"{topic}-value", older)
    # ours adds `value` with no default: BACKWARD refuses it
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          producers: [source.out]
          consumers: [sink.in]
          format: avro-registry
          register: auto
        """,
    )
    result = invoke("verify", path, "--registry", schema_registry_url)
    assert result.exit_code == 1
    assert "error[incompatible-schema]" in result.stdout
    # the owner registered Reading.avsc as written (namespace, short names), and our
    # producer may not register (the default): the lookup must still find it
    fine = unique_topic()
    register(schema_registry_client, f"{fine}-value", READING, level="FORWARD_TRANSITIVE")
    path = write_blueprint(
        tmp_path,
        f"""\
        {fine}:
          producers: [source.out]
          consumers: [sink.in]
          format: avro-registry
        """,
    )
    ok = invoke("verify", path, "--registry", schema_registry_url)
    assert ok.exit_code == 0, ok.output
    assert "✓ app: 2 streamlets, 1 topic, 0 problems" in ok.stdout


def test_verify_reports_a_producer_whose_schema_is_not_registered_under_never(
    tmp_path: Path, schema_registry_url: str
) -> None:
    topic = unique_topic()
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          producers: [source.out]
          format: json-registry
          register: never
        """,
    )
    result = invoke("verify", path, "--registry", schema_registry_url)
    assert result.exit_code == 1, result.output
    assert (
        f"{position(path, 'producers:', 'source.out')}: error[schema-not-registered]: "
        f"topic {topic}: source.out writes "
        f"tests.fixtures.Reading, which is not registered under subject {topic}-value, "
        "and register is never"
    ) in result.stdout
    assert "register: auto" in result.stdout  # the hint says what to do


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_verify_reports_a_registry_nothing_listens_on(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    path = write_blueprint(
        tmp_path,
        """\
        readings:
          producers: [source.out]
          consumers: [sink.in]
          format: avro-registry
        """,
    )
    result = invoke("verify", path, "--registry", url)
    assert result.exit_code == 1, result.output
    error = next(line for line in result.stdout.splitlines() if "registry-unreachable" in line)
    at = position(path, "format:", "avro-registry")
    assert error.startswith(f"{at}: error[registry-unreachable]: "), error
    assert url in error
    assert "check the URL and that the registry is running" in result.stdout


def test_verify_refuses_a_consumer_that_cannot_read_an_older_version_still_in_the_topic(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = unique_topic()
    subject = f"{topic}-value"
    # v1 had no `value`; v2 added it with a default (BACKWARD allows it). Our sink's
    # Reading needs `value` and has no default: it reads v2, not v1's records
    older = register(schema_registry_client, subject, {**READING, "fields": READING["fields"][:1]})
    fields = [READING["fields"][0], {**READING["fields"][1], "default": 0.0}]
    latest = register(schema_registry_client, subject, {**READING, "fields": fields})
    assert latest != older
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          consumers: [sink.in]
          format: avro-registry
        """,
    )
    result = verify_file(path, registry=ConfluentRegistry(schema_registry_url))
    problem = only(result, "incompatible-schema")  # the latest reads fine; version 1 does not
    assert f"version 1 of subject {subject} (id {older})" in problem.message
    assert f"{path}:{problem.position.line}:{problem.position.column}" == position(
        path, "consumers:", "sink.in"
    )


def test_verify_warns_at_the_topic_when_its_subject_lets_producers_break_its_consumers(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    """Someone else made the subject, at BACKWARD: a producer may then drop a field our
    consumer needs, and the registry accepts it. Said at the topic, with the level to set."""
    topic = unique_topic()
    register(schema_registry_client, f"{topic}-value", READING)  # BACKWARD, by its owner
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          producers: [source.out]
          consumers: [sink.in]
          format: avro-registry
          config: {{cleanup.policy: compact}}
        """,
    )
    result = invoke("verify", path, "--registry", schema_registry_url)
    assert result.exit_code == 0, result.output  # a warning: the application still runs
    warning = next(line for line in result.stdout.splitlines() if "unsafe-compatibility" in line)
    at = position(path, f"{topic}:", topic)
    assert warning.startswith(
        f"{at}: warning[unsafe-compatibility]: topic {topic}: subject {topic}-value has "
        "compatibility BACKWARD, which lets a producer register a schema that sink.in cannot read"
    ), warning
    # the fix: the level streamflow gives such a subject (compacted: FULL_TRANSITIVE)
    assert f'config/{topic}-value {{"compatibility": "FULL_TRANSITIVE"}}' in result.stdout
    assert "1 warning" in result.stdout

    # a subject at a level that protects consumers: nothing to say
    schema_registry_client.set_compatibility(subject_name=f"{topic}-value", level="FULL_TRANSITIVE")
    quiet = invoke("verify", path, "--registry", schema_registry_url)
    assert quiet.exit_code == 0 and "unsafe-compatibility" not in quiet.stdout, quiet.output


def test_verify_does_not_warn_for_a_subject_the_application_only_produces(
    tmp_path: Path, schema_registry_url: str, schema_registry_client: SchemaRegistryClient
) -> None:
    topic = unique_topic()
    register(schema_registry_client, f"{topic}-value", READING)  # BACKWARD: fine for producers
    path = write_blueprint(
        tmp_path,
        f"""\
        {topic}:
          producers: [source.out]
          format: avro-registry
        """,
    )
    result = invoke("verify", path, "--registry", schema_registry_url)
    assert result.exit_code == 0, result.output
    assert "unsafe-compatibility" not in result.stdout
