"""The verifier's first pass: YAML, fields, types and names, each at its line and column."""

from __future__ import annotations

from streamflow.blueprint import Severity
from tests.blueprint.bp_helpers import only, verify, where


def test_invalid_yaml_is_a_problem_with_the_parser_position() -> None:
    result = verify(
        """
        name: app
        streamlets: [source
        topics: {}
        """
    )
    problem = only(result, "invalid-yaml")
    assert where(problem) == (3, 7)
    assert problem.position.file == "bp.yaml"
    assert result.application is None


def test_duplicate_key_is_reported_not_raised() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
          source:
            class: bp_fixture_streamlets:Sink
        """
    )
    problem = only(result, "duplicate-key")
    assert where(problem) == (5, 3)
    assert "line 3" in problem.message


def test_unknown_field_hints_at_the_closest_field() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            replica: 2
        """
    )
    problem = only(result, "unknown-field")
    assert where(problem) == (5, 5)
    assert problem.hint == "did you mean `replicas`?"


def test_missing_field_points_at_the_streamlet() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            replicas: 1
        """
    )
    problem = only(result, "missing-field")
    assert where(problem) == (3, 3)
    assert "'class'" in problem.message


def test_missing_name_points_at_the_document_start() -> None:
    result = verify(
        """
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        """
    )
    assert where(only(result, "missing-field")) == (1, 1)


def test_wrong_type_points_at_the_value() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        topics:
          readings:
            producers: source.out
        """
    )
    problem = only(result, "wrong-type")
    assert where(problem) == (7, 16)
    assert "list" in problem.message
    assert "[source.out]" in problem.hint


def test_invalid_application_name() -> None:
    result = verify(
        """
        name: Wine_Quality
        streamlets: {}
        """
    )
    problem = only(result, "invalid-name")
    assert where(problem) == (1, 7)
    assert problem.hint == "for example 'wine-quality'"


def test_invalid_streamlet_name() -> None:
    result = verify(
        """
        name: app
        streamlets:
          My_Source:
            class: bp_fixture_streamlets:Source
        """
    )
    problem = only(result, "invalid-name")
    assert where(problem) == (3, 3)
    assert "My_Source" in problem.message


def test_invalid_topic_name() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        topics:
          "bad topic!":
            producers: [source.out]
        """
    )
    problem = only(result, "invalid-topic-name")
    assert where(problem) == (6, 3)


def test_invalid_dead_letter_topic_name() -> None:
    long_name = "x" * 250
    result = verify(
        f"""
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            dlq: {long_name}
        """
    )
    assert where(only(result, "invalid-topic-name")) == (5, 10)


def test_invalid_replicas_negative_and_not_a_number() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            replicas: -1
          other:
            class: bp_fixture_streamlets:Source
            replicas: two
        """
    )
    found = [where(p) for p in result.problems if p.code == "invalid-replicas"]
    assert found == [(5, 15), (8, 15)]


def test_zero_replicas_is_allowed() -> None:
    result = verify(
        """
        name: app
        schemas: [schemas]
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            replicas: 0
        topics:
          readings:
            producers: [source.out]
        """
    )
    assert result.valid, result.problems
    assert result.application is not None
    assert result.application.streamlets["source"].replicas == 0


def test_invalid_guarantee_hints_at_the_spelling() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            guarantee: exactly_once
        """
    )
    problem = only(result, "invalid-guarantee")
    assert where(problem) == (5, 16)
    assert problem.hint == "did you mean `exactly-once`?"


def test_lineage_is_on_unless_turned_off_and_survives_the_spec() -> None:
    result = verify(
        """
        name: app
        schemas: [schemas]
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
          quiet:
            class: bp_fixture_streamlets:Source
            lineage: false
        topics:
          readings:
            producers: [source.out]
          others:
            producers: [quiet.out]
        """
    )
    assert result.valid, result.problems
    app = result.application
    assert app is not None
    assert (app.streamlets["source"].lineage, app.streamlets["quiet"].lineage) == (True, False)
    again = type(app).from_dict(app.to_dict())
    assert (again.streamlets["source"].lineage, again.streamlets["quiet"].lineage) == (True, False)


def test_lineage_that_is_not_a_boolean_is_a_clear_error() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            lineage: "no"
        """
    )
    problem = only(result, "wrong-type")
    assert where(problem) == (5, 14)
    assert problem.message == "source.lineage must be true or false, got the string 'no'"


def test_empty_application() -> None:
    result = verify(
        """
        name: app
        streamlets: {}
        """
    )
    assert where(only(result, "empty-application")) == (2, 1)


def test_empty_document_is_missing_everything() -> None:
    result = verify("")
    assert {p.code for p in result.problems} == {"missing-field", "empty-application"}


def test_invalid_partitions_and_replication() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        topics:
          readings:
            producers: [source.out]
            partitions: 0
            replication: 1.5
        """
    )
    assert where(only(result, "invalid-partitions")) == (8, 17)
    assert where(only(result, "invalid-replication")) == (9, 18)


def test_invalid_port_ref() -> None:
    result = verify(
        """
        name: app
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        topics:
          readings:
            producers: [source]
        """
    )
    assert where(only(result, "invalid-port-ref")) == (7, 17)


def test_missing_search_path() -> None:
    result = verify(
        """
        name: app
        schemas: [no-such-dir]
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        """
    )
    assert where(only(result, "path-not-found")) == (2, 11)


def test_topic_and_kafka_config_values_become_strings() -> None:
    result = verify(
        """
        name: app
        schemas: [schemas]
        kafka:
          bootstrap: localhost:9092
          config: {enable.idempotence: true, linger.ms: 5}
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
        topics:
          readings:
            producers: [source.out]
            config: {cleanup.policy: compact, retention.ms: 1000}
            managed: false
        """
    )
    app = result.application
    assert app is not None, result.problems
    assert app.kafka.bootstrap == "localhost:9092"
    assert dict(app.kafka.config) == {"enable.idempotence": "true", "linger.ms": "5"}
    topic = app.topics["readings"]
    assert dict(topic.config) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert topic.managed is False
    assert topic.compacted


def test_problems_are_errors_unless_said_otherwise() -> None:
    result = verify("name: app\nstreamlets: {}\n")
    assert all(p.severity is Severity.ERROR for p in result.problems)


def test_a_streamlet_with_nothing_under_it_is_missing_its_class() -> None:
    result = verify("name: app\nstreamlets:\n  source:\n")
    problem = only(result, "missing-field")
    assert where(problem) == (3, 3)
