"""The verifier's topic pass: ports, directions, connections, schemas and compaction."""

from __future__ import annotations

from streamflow.blueprint import Severity
from tests.blueprint.bp_helpers import only, verify, where

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


def test_a_good_topic_is_valid() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out]\n    consumers: [sink.in]\n"
    )
    assert result.problems == []
    assert result.application is not None


def test_unknown_port_hints_at_the_closest_port() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.output]\n    consumers: [sink.in]\n"
    )
    problem = only(result, "unknown-port")
    assert where(problem) == (10, 17)
    assert problem.hint == "did you mean `source.out`?"
    assert "source.out" in problem.message  # lists the outlets


def test_unknown_streamlet_in_a_port_ref() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out]\n    consumers: [snk.in]\n"
    )
    problem = only(result, "unknown-streamlet")
    assert where(problem) == (11, 17)
    assert problem.hint == "did you mean `sink.in`?"


def test_producer_not_outlet() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out, sink.in]\n    consumers: [sink.in]\n"
    )
    problem = only(result, "producer-not-outlet")
    assert where(problem) == (10, 29)


def test_consumer_not_inlet() -> None:
    result = verify(
        STREAMLETS
        + "  readings:\n    producers: [source.out]\n    consumers: [sink.in, source.out]\n"
    )
    problem = only(result, "consumer-not-inlet")
    assert where(problem) == (11, 26)


def test_port_bound_to_many_topics() -> None:
    result = verify(
        STREAMLETS
        + """\
  first:
    producers: [source.out]
    consumers: [sink.in]
  second:
    producers: [source.out]
"""
    )
    problem = only(result, "port-bound-to-many-topics")
    assert where(problem) == (13, 17)
    assert "first" in problem.message and "second" in problem.message


def test_an_outlet_and_inlet_of_one_streamlet_may_share_a_topic() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  relay:
    class: bp_fixture_streamlets:Relay
topics:
  loop:
    producers: [relay.out]
    consumers: [relay.in]
"""
    )
    assert result.problems == []


def test_unconnected_inlet_is_an_error() -> None:
    result = verify(STREAMLETS + "  readings:\n    producers: [source.out]\n")
    problem = only(result, "unconnected-inlet")
    assert where(problem) == (6, 3)
    assert problem.severity is Severity.ERROR
    assert result.application is None


def test_unconnected_control_inlet_is_an_error_too() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
  ctl:
    class: bp_fixture_streamlets:Controlled
topics:
  readings:
    producers: [source.out]
    consumers: [ctl.in]
"""
    )
    problem = only(result, "unconnected-inlet")
    assert where(problem) == (6, 3)
    assert "control inlet ctl.model" in problem.message


def test_unconnected_outlet_is_a_warning() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
"""
    )
    problem = only(result, "unconnected-outlet")
    assert where(problem) == (4, 3)
    assert problem.severity is Severity.WARNING
    assert result.valid and result.application is not None


def test_control_topic_not_compacted_is_a_warning() -> None:
    text = """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
  ctl:
    class: bp_fixture_streamlets:Controlled
topics:
  readings:
    producers: [source.out]
    consumers: [ctl.in]
  models:
    consumers: [ctl.model]
    managed: false
"""
    result = verify(text)
    problem = only(result, "control-topic-not-compacted")
    assert where(problem) == (12, 3)
    assert problem.severity is Severity.WARNING
    assert result.valid
    compacted = verify(text + "    config: {cleanup.policy: compact}\n")
    assert compacted.problems == []


def test_incompatible_schema_points_at_the_topic() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
  summary:
    class: bp_fixture_streamlets:SummarySink
topics:
  readings:
    producers: [source.out]
    consumers: [summary.in]
"""
    )
    problem = only(result, "incompatible-schema")
    assert where(problem) == (9, 3)
    assert "tests.fixtures.Summary" in problem.message
    assert "tests.fixtures.Reading" in problem.message


def test_duplicate_port_ref_in_one_topic() -> None:
    result = verify(
        STREAMLETS + "  readings:\n    producers: [source.out]\n    consumers: [sink.in, sink.in]\n"
    )
    assert where(only(result, "duplicate-port-ref")) == (11, 26)
