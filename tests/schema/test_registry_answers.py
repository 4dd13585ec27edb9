"""What a registry's answers mean to streamflow: dead letter, backpressure, or a clear error.

Each of these failed on the first cut of the registry formats: a bare 404 (a
wrong URL) dead-lettered every record for good, an unknown id was never asked
about again, a URL without a scheme ended in a traceback, undeclared JSON
properties were carried through, and a ``long`` passed for a ``timestamp-millis``
when looking for an already registered schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from streamflow.cli.main import app as cli_app
from streamflow.runtime import registry as registries
from streamflow.schema import Schema, registry_codecs
from streamflow.schema import registry as wire
from streamflow.schema.codecs import DecodeError, JsonTopicCodec
from tests.schema.test_registry_codecs import (
    READING_V1,
    MemoryRegistry,
    avro_body,
    avro_codec,
    framed,
)


@pytest.mark.parametrize(
    ("status", "code", "raised"),
    [
        (404, 40403, wire.UnknownSchemaId),
        (404, 40401, wire.NotFound),
        (404, 40402, wire.NotFound),
        (404, None, wire.RegistryRefused),  # not the registry speaking: a wrong URL, a proxy
        (404, 0, wire.RegistryRefused),
        (401, 40101, wire.RegistryRefused),
        (409, 409, wire.RegistryRefused),  # an incompatible schema
        (500, 50001, wire.RegistryUnavailable),
        (503, None, wire.RegistryUnavailable),
        (408, None, wire.RegistryUnavailable),
        (429, None, wire.RegistryUnavailable),
    ],
)
def test_each_registry_answer_maps_to_what_the_runtime_does_with_it(
    status: int, code: int | None, raised: type[Exception]
) -> None:
    with pytest.raises(raised) as caught:
        registries._raise_for(status, code, "message", "schema id 7")
    assert type(caught.value) is raised  # not a subclass standing in for it
    if status == 404 and raised is wire.RegistryRefused:
        assert "ccompat" in str(caught.value)  # says what the URL probably lacks


def test_an_unknown_id_is_asked_about_again_once_its_answer_is_stale(
    make_schema: Callable[[dict[str, Any]], Schema], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1_000.0]
    monkeypatch.setattr(registry_codecs.time, "monotonic", lambda: clock[0])
    registry = MemoryRegistry()
    codec = avro_codec(make_schema(READING_V1), registry)
    record = framed(registry._next_id, avro_body(READING_V1, {"id": "r1", "value": 1.0}))
    for _ in range(2):
        with pytest.raises(DecodeError, match="is not in the registry"):
            codec.decode(record)
    assert registry.lookups == 1  # cached while fresh: one lookup, not one per record
    registry.add("readings-value", "AVRO", json.dumps(READING_V1))  # a replica catches up
    clock[0] += wire.UNKNOWN_ID_RECHECK_S + 1
    assert codec.decode(record) == {"id": "r1", "value": 1.0}
    assert registry.lookups == 2


def test_a_wrong_type_schema_stays_refused_without_asking_again(
    make_schema: Callable[[dict[str, Any]], Schema], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = MemoryRegistry()
    schema = make_schema(READING_V1)
    json_id = registry.add("other-value", "JSON", wire.registry_text(schema, "JSON"))
    codec = avro_codec(schema, registry)
    clock = [1_000.0]
    monkeypatch.setattr(registry_codecs.time, "monotonic", lambda: clock[0])
    for _ in range(2):
        with pytest.raises(DecodeError, match="is a JSON schema"):
            codec.decode(framed(json_id, b"\x02"))
        clock[0] += wire.UNKNOWN_ID_RECHECK_S * 10
    assert registry.lookups == 1


@pytest.mark.parametrize("url", ["localhost:8081", "registry", "ftp://registry:8081", "http://"])
def test_a_registry_url_without_http_is_refused_in_one_sentence(url: str) -> None:
    problem = wire.url_problem(url)
    assert problem is not None and "http:// or https://" in problem
    with pytest.raises(registries.RegistryConfigError, match="http:// or https://"):
        registries.ConfluentRegistry(url)


def test_verify_with_a_registry_url_without_a_scheme_is_a_clear_error(tmp_path: Any) -> None:
    blueprint = tmp_path / "app.yaml"
    blueprint.write_text("name: formats\nstreamlets: {}\ntopics: {}\n")
    result = CliRunner().invoke(cli_app, ["verify", str(blueprint), "--registry", "localhost:8081"])
    assert result.exit_code == 1
    assert "must be http:// or https://" in result.output
    assert "Traceback" not in result.output


def test_a_blueprint_registry_url_without_a_scheme_is_a_verifier_problem(tmp_path: Any) -> None:
    from streamflow.blueprint import verify_file

    blueprint = tmp_path / "app.yaml"
    blueprint.write_text(
        "name: formats\nkafka:\n  schema_registry: localhost:8081\nstreamlets: {}\ntopics: {}\n"
    )
    problems = verify_file(blueprint).problems
    found = [p for p in problems if p.code == "invalid-registry-url"]
    assert len(found) == 1 and found[0].position.line == 3, problems


def test_credentials_in_a_blueprint_registry_url_are_a_located_secret_problem(
    tmp_path: Any,
) -> None:
    """``http://bob:pw@host`` passed verify, then sat in the ConfigMap, dead-letter
    headers and a log line. It is refused where it is written; the password is never
    repeated, in the problem or anywhere else verify prints."""
    blueprint = tmp_path / "app.yaml"
    blueprint.write_text(
        "name: formats\nkafka:\n  schema_registry: http://bob:s3cr3t@registry:8081/apis\n"
        "streamlets: {}\ntopics: {}\n"
    )
    result = CliRunner().invoke(cli_app, ["verify", str(blueprint)])
    assert result.exit_code == 1
    assert "secret-in-config" in result.output and "app.yaml:3" in result.output
    assert "STREAMFLOW_SCHEMA_REGISTRY_USER_INFO" in result.output
    assert "s3cr3t" not in result.output and "bob" not in result.output
    assert "http://***@registry:8081/apis" in result.output


@pytest.mark.parametrize("how", ["flag", "env"])
def test_credentials_in_a_registry_url_given_to_the_cli_are_refused_unrepeated(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    blueprint = tmp_path / "app.yaml"
    blueprint.write_text("name: formats\nstreamlets: {}\ntopics: {}\n")
    url = "https://bob:s3cr3t@registry.example/"
    args = ["verify", str(blueprint)]
    if how == "flag":
        args += ["--registry", url]
    else:
        monkeypatch.setenv("STREAMFLOW_SCHEMA_REGISTRY_URL", url)
        with pytest.raises(registries.RegistryConfigError) as refused:
            registries.connect(None)
        assert "s3cr3t" not in str(refused.value) and "holds credentials" in str(refused.value)
        return
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 1
    assert "holds credentials" in result.output and "s3cr3t" not in result.output


def test_urls_are_redacted_in_messages() -> None:
    assert wire.redacted("http://bob:pw@host:8081/x?y=1") == "http://***@host:8081/x?y=1"
    assert wire.redacted("http://host:8081/x") == "http://host:8081/x"
    assert wire.has_credentials("http://bob@host/") and not wire.has_credentials("http://h/")


def test_a_json_topic_keeps_only_the_declared_fields_both_ways(
    make_schema: Callable[[dict[str, Any]], Schema],
) -> None:
    codec = JsonTopicCodec(make_schema(READING_V1))
    decoded = codec.decode(b'{"id": "r1", "value": 2, "extra": "zz"}')
    assert decoded == {"id": "r1", "value": 2.0}
    assert json.loads(codec.encode({"id": "r1", "value": 2.0, "extra": "zz"})) == {
        "id": "r1",
        "value": 2.0,
    }


def test_a_long_is_not_taken_for_an_equal_schema_with_a_timestamp() -> None:
    def reading(kind: Any) -> str:
        return json.dumps(
            {
                "type": "record",
                "name": "R",
                "namespace": "t",
                "fields": [{"name": "at", "type": kind}],
            }
        )

    timestamp = reading({"type": "long", "logicalType": "timestamp-millis"})
    plain = reading("long")
    documented = json.dumps(
        {
            "type": "record",
            "name": "R",
            "namespace": "t",
            "doc": "same schema, with a doc",
            "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        }
    )
    assert registries._comparable("AVRO", timestamp) != registries._comparable("AVRO", plain)
    assert registries._comparable("AVRO", timestamp) == registries._comparable("AVRO", documented)


def test_registry_credentials_come_from_the_environment_and_never_reach_librdkafka() -> None:
    from streamflow.runtime.clients import config_from_env

    secret_env = {
        "STREAMFLOW_KAFKA_SASL_PASSWORD": "kafka-secret",
        "STREAMFLOW_KAFKA_SCHEMA_REGISTRY_USER_INFO": "svc:registry-secret",
    }
    assert config_from_env(secret_env) == {"sasl.password": "kafka-secret"}
    from_secret = registries.ConfluentRegistry("http://registry:8081", environ=secret_env)
    assert from_secret._auth == ("svc", "registry-secret")
    direct = registries.ConfluentRegistry(
        "http://registry:8081", environ={"STREAMFLOW_SCHEMA_REGISTRY_USER_INFO": "me:pw"}
    )
    assert direct._auth == ("me", "pw")
    assert registries.ConfluentRegistry("http://registry:8081", environ={})._auth is None
