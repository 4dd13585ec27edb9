"""The verifier's streamlet pass: classes load and describe, config fits the parameters."""

from __future__ import annotations

from tests.blueprint.bp_helpers import only, verify, where

HEADER = """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
"""
# Lines 1-5 are HEADER; what a test appends starts on line 6.


def test_class_not_found_module_and_attribute() -> None:
    result = verify(
        HEADER
        + """\
  a:
    class: no_such_module_here:Thing
  b:
    class: bp_fixture_streamlets:Nope
"""
    )
    found = [(where(p), p.hint) for p in result.problems if p.code == "class-not-found"]
    assert [w for w, _ in found] == [(7, 12), (9, 12)]
    assert "Source" in found[1][1]  # lists the streamlets the module has


def test_not_a_streamlet() -> None:
    result = verify(HEADER + "  plain:\n    class: bp_fixture_streamlets:Plain\n")
    problem = only(result, "not-a-streamlet")
    assert where(problem) == (7, 12)


def test_invalid_streamlet_lists_broken_declarations() -> None:
    result = verify(
        HEADER
        + """\
  dup:
    class: bp_fixture_streamlets:DuplicatePorts
  bad:
    class: bp_fixture_streamlets:BadDefault
"""
    )
    found = [p for p in result.problems if p.code == "invalid-streamlet"]
    assert [where(p) for p in found] == [(7, 12), (9, 12)]
    assert "'in' is also used by" in found[0].message
    assert "default 5.0 is invalid" in found[1].message


def test_unknown_config_parameter_hints_at_the_closest() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
    config:
      rat: 2
"""
    )
    problem = only(result, "unknown-config-parameter")
    assert where(problem) == (7, 7)
    assert problem.hint == "did you mean `rate`?"


def test_invalid_config_value_points_at_the_value() -> None:
    result = verify(
        """\
name: app
schemas: [schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
    config:
      rate: fast
      count: -3
"""
    )
    found = [p for p in result.problems if p.code == "invalid-config-value"]
    assert [where(p) for p in found] == [(7, 13), (8, 14)]
    assert "expected a number" in found[0].message
    assert "below the minimum" in found[1].message


def test_missing_required_config() -> None:
    result = verify(HEADER + "  needy:\n    class: bp_fixture_streamlets:NeedsConfig\n")
    problem = only(result, "missing-required-config")
    assert where(problem) == (6, 3)
    assert "'label'" in problem.message
    assert "--set needy.label=VALUE" in problem.hint


def test_unknown_schema_points_at_the_class() -> None:
    result = verify(HEADER + "  odd:\n    class: bp_fixture_streamlets:UnknownSchema\n")
    problem = only(result, "unknown-schema")
    assert where(problem) == (7, 12)
    assert "tests.fixtures.Missing" in problem.message


def test_invalid_schema_is_reported_at_the_avsc_file() -> None:
    result = verify(
        """\
name: app
schemas: [schemas, bad_schemas]
streamlets:
  source:
    class: bp_fixture_streamlets:Source
"""
    )
    problem = only(result, "invalid-schema")
    assert problem.position.file.endswith("Broken.avsc")
    assert where(problem) == (5, 38)  # where json.loads stops


def test_overrides_are_parsed_and_win() -> None:
    result = verify(
        HEADER + "    config: {rate: 2}\ntopics:\n  t:\n    producers: [source.out]\n",
        overrides={"source.rate": "3.5", "source.count": "10"},
    )
    assert result.application is not None, result.problems
    assert dict(result.application.streamlets["source"].config) == {"rate": 3.5, "count": 10}


def test_bad_overrides_are_problems() -> None:
    result = verify(
        HEADER + "topics:\n  t:\n    producers: [source.out]\n",
        overrides={"source.rate": "fast", "sauce.rate": "1", "source.nope": "1", "x": "1"},
    )
    codes = sorted(p.code for p in result.problems)
    assert codes == [
        "invalid-config-value",
        "invalid-override",
        "unknown-config-parameter",
        "unknown-streamlet",
    ]
    assert all(p.position.file == "<--set>" for p in result.problems)
    assert only(result, "unknown-streamlet").hint == "did you mean `source`?"


def test_config_in_the_application_is_json_able() -> None:
    result = verify(
        HEADER + "    config: {rate: 2, count: '7'}\ntopics:\n  t:\n    producers: [source.out]\n"
    )
    assert result.application is not None, result.problems
    config = result.application.streamlets["source"].config
    assert config == {"rate": 2.0, "count": 7}
    assert isinstance(config["rate"], float)
