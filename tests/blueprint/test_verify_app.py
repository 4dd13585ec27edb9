"""The verifier as a whole: all problems at once, and the Application it produces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamflow.blueprint import (
    Application,
    BlueprintError,
    load_application,
    verify_file,
)
from tests.blueprint.bp_helpers import EXAMPLE, FIXTURES, verify, where

ROOT = Path(__file__).parents[2]


def test_the_example_blueprint_verifies_clean() -> None:
    result = verify_file(EXAMPLE)
    assert result.problems == []
    app = result.application
    assert app is not None
    assert app.name == "wine-quality"
    assert list(app.streamlets) == ["source", "scorer", "logger"]
    assert app.topics["wine-samples"].partitions == 4
    assert app.streamlets["scorer"].replicas == 2


def test_the_application_has_absolute_paths_and_descriptors() -> None:
    app = load_application(EXAMPLE)
    assert app.source == str(EXAMPLE.resolve())
    assert app.python_paths[0] == str(EXAMPLE.parent.resolve())
    assert str(ROOT / "schemas") in app.schema_paths
    assert all(Path(p).is_absolute() for p in (*app.schema_paths, *app.python_paths))
    assert set(app._descriptors) == {"source", "scorer", "logger"}
    assert app.descriptor("scorer").shape.value == "processor"


def test_the_application_round_trips_through_json() -> None:
    app = load_application(EXAMPLE, overrides={"scorer.threshold": "6.5"})
    data = json.loads(json.dumps(app.to_dict()))
    again = Application.from_dict(data)
    assert again == app
    assert again.streamlets["scorer"].config["threshold"] == 6.5


def test_every_problem_is_returned_at_once_in_reading_order() -> None:
    result = verify(
        """
        name: Bad_App
        schemas: [schemas]
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            replicas: -2
            config: {rat: 1}
          sink:
            class: bp_fixture_streamlets:Nope
        topics:
          readings:
            producers: [source.out]
            consumers: [sink.in, ghost.in]
            partitions: 0
        """
    )
    found = [(p.code, where(p)) for p in result.problems]
    assert found == [
        ("invalid-name", (1, 7)),
        ("invalid-replicas", (6, 15)),
        ("unknown-config-parameter", (7, 14)),
        ("class-not-found", (9, 12)),
        ("unknown-streamlet", (13, 26)),
        ("invalid-partitions", (14, 17)),
    ]
    assert result.application is None
    assert result.name == "Bad_App"


def test_load_application_raises_with_the_formatted_problems() -> None:
    with pytest.raises(BlueprintError) as caught:
        load_application(FIXTURES / "broken_blueprint.yaml")
    error = caught.value
    # the misspelt `clas` is one problem (unknown-field with a hint), not also a missing class
    assert [p.code for p in error.problems] == ["unknown-field", "class-not-found"]
    text = str(error)
    assert "broken_blueprint.yaml:4:5: error[unknown-field]: unknown field 'clas'" in text
    assert "\n  hint: did you mean `class`?" in text


def test_an_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    result = verify_file(tmp_path / "missing.yaml")
    assert [p.code for p in result.problems] == ["unreadable-file"]
    assert result.application is None


def test_a_blueprint_that_is_not_a_mapping() -> None:
    result = verify("- name: app\n")
    assert [(p.code, where(p)) for p in result.problems] == [("wrong-type", (1, 1))]
