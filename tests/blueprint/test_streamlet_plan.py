"""A streamlet's plan: what its replicas ask of the application, answered once."""

from __future__ import annotations

import dataclasses

import pytest

from streamflow.api.config import ConfigError
from streamflow.blueprint import EXACTLY_ONCE, load_application
from streamflow.blueprint.plan import StreamletPlan
from tests.blueprint.bp_helpers import EXAMPLE


def test_the_scorers_plan_names_its_topics_group_dead_letters_and_changelogs() -> None:
    app = load_application(EXAMPLE)
    plan = StreamletPlan.of(app, "scorer")
    assert plan.descriptor is app.descriptor("scorer")
    assert plan.spec is app.streamlets["scorer"]
    assert {port: topic.name for port, topic in plan.topics.items()} == {
        "in": "wine-samples",
        "out": "wine-scores",
    }
    assert plan.topic("in") is app.topics["wine-samples"]
    assert plan.group == "wine-quality.scorer" == app.consumer_group("scorer")
    assert plan.dlq_topic == "wine-quality.scorer.dlq" == app.dlq_topic("scorer")
    assert plan.changelogs == {"in": "wine-quality.scorer.in.changelog"}
    assert plan.client_id_prefix == "wine-quality.scorer"
    assert not plan.exactly_once


def test_its_config_is_parsed_against_the_class_with_defaults_filled() -> None:
    app = load_application(EXAMPLE, overrides={"scorer.threshold": "6.5"})
    plan = StreamletPlan.of(app, "scorer")
    assert plan.config["threshold"] == 6.5  # a float, not the override's string
    declared = {p.name for p in plan.descriptor.params}
    assert declared <= set(plan.config)  # every parameter, given or not
    with pytest.raises(TypeError):
        plan.config["threshold"] = 1.0  # type: ignore[index]


def test_a_source_has_no_inlets_and_so_no_changelogs() -> None:
    plan = StreamletPlan.of(load_application(EXAMPLE), "source")
    assert plan.changelogs == {}
    assert set(plan.topics) == {"out"}


def test_the_guarantee_and_a_bad_config_come_from_the_spec() -> None:
    app = load_application(EXAMPLE)
    spec = dataclasses.replace(app.streamlets["scorer"], guarantee=EXACTLY_ONCE)
    eo = dataclasses.replace(app, streamlets={**app.streamlets, "scorer": spec})
    assert StreamletPlan.of(eo, "scorer").exactly_once
    with pytest.raises(ConfigError, match="threshold"):
        StreamletPlan.of(app.with_config("scorer", {"threshold": "high"}), "scorer")
    with pytest.raises(KeyError):
        StreamletPlan.of(app, "nope")
