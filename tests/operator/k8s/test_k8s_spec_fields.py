"""The resource's spec and the Application cannot drift apart.

The CRD's schema, the Application's plain form (`Application.to_dict`) and the spec's
names are all generated from one field table (`schema.fields`, declared on the
Application's dataclasses). These tests hold the generated forms to each other at every
level whose keys are the Application's fields: the schema's properties must be exactly
those fields, camelCased, plus the deploy-time ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from streamflow.blueprint.model import (
    EXACTLY_ONCE,
    Application,
    AutoscaleSpec,
    KafkaSpec,
    PortRef,
    StreamletSpec,
    TopicSpec,
)
from streamflow.operator.kubernetes import crd, spec
from streamflow.schema import fields
from streamflow.schema.bounds import DecodeLimits
from streamflow.schema.formats import RegisterPolicy, TopicFormat

# the spec's fields that are not the Application's: where and how its pods run
DEPLOY_TIME = set(spec.DEPLOY_TIME)


def _every_field_set() -> Application:
    """An application whose every optional field is given, so its dict has every key."""
    streamlet = StreamletSpec(
        name="s",
        class_path="m:S",
        config={"k": 1},
        replicas=2,
        guarantee=EXACTLY_ONCE,
        dlq="s.dead",
        autoscale=AutoscaleSpec(min=1, max=3, target_lag=10, keda=True),
        resources={"limits": {"memory": "1Gi"}},
        stall_after=30.0,
        lineage=False,
        decode_limits=DecodeLimits(max_items=10),
    )
    topic = TopicSpec(
        name="t",
        producers=(PortRef("s", "out"),),
        consumers=(PortRef("s", "in"),),
        config={"cleanup.policy": "compact"},
        format=next(iter(TopicFormat)),
        register=RegisterPolicy.AUTO,
    )
    kafka = KafkaSpec(
        bootstrap="k:9092",
        config={"acks": "all"},
        secret="sec",
        schema_registry="http://r",
        register=RegisterPolicy.NEVER,
    )
    return Application(
        name="a",
        streamlets={"s": streamlet},
        topics={"t": topic},
        kafka=kafka,
        schema_paths=("schemas",),
        python_paths=("src",),
        source="bp.yaml",
    )


def _camel(keys: Any) -> set[str]:
    return {spec.camel_case(k) for k in keys}


def _properties(schema: dict[str, Any]) -> set[str]:
    return set(schema["properties"])


def test_every_level_of_the_schema_is_the_applications_fields_camel_cased() -> None:
    data = _every_field_set().to_dict()
    schema = crd.spec_schema()
    streamlet = schema["properties"]["streamlets"]["additionalProperties"]
    levels = {
        "spec": (_properties(schema), _camel(data) | DEPLOY_TIME),
        "kafka": (_properties(schema["properties"]["kafka"]), _camel(data["kafka"])),
        "a streamlet": (_properties(streamlet), _camel(data["streamlets"]["s"])),
        "autoscale": (
            _properties(streamlet["properties"]["autoscale"]),
            _camel(data["streamlets"]["s"]["autoscale"]),
        ),
        "decodeLimits": (
            _properties(streamlet["properties"]["decodeLimits"]),
            _camel(data["streamlets"]["s"]["decode_limits"]),
        ),
        "a topic": (
            _properties(schema["properties"]["topics"]["additionalProperties"]),
            _camel(data["topics"]["t"]),
        ),
    }
    drift = {
        level: {"only in the schema": sorted(s - a), "only in the Application": sorted(a - s)}
        for level, (s, a) in levels.items()
        if s != a
    }
    assert drift == {}


def test_the_spec_round_trips_to_the_same_application() -> None:
    app = _every_field_set()
    named = fields.to_plain(app, naming=spec.camel_case)
    assert (
        "stallAfter" in named["streamlets"]["s"]
        and "cleanup.policy" in named["topics"]["t"]["config"]
    )
    back = fields.from_plain(Application, named, naming=spec.camel_case)
    assert back == app
    assert back.to_dict() == app.to_dict()


def test_the_dict_form_has_a_key_for_every_field_of_the_specs() -> None:
    """A dataclass field that `to_dict` forgets cannot reach the spec, or the schema."""
    data = _every_field_set().to_dict()
    spelled = {"class_path": "class"}  # the blueprint's own word
    for cls, keys, skip in (
        (StreamletSpec, data["streamlets"]["s"], {"name"}),
        (TopicSpec, data["topics"]["t"], {"name"}),
        (KafkaSpec, data["kafka"], set()),
        (AutoscaleSpec, data["streamlets"]["s"]["autoscale"], set()),
        (DecodeLimits, data["streamlets"]["s"]["decode_limits"], set()),
    ):
        names = {spelled.get(f.name, f.name) for f in dataclasses.fields(cls)} - skip
        assert names == set(keys), cls.__name__


@pytest.mark.parametrize(
    ("snake", "camel"),
    [("stall_after", "stallAfter"), ("max_record_bytes", "maxRecordBytes"), ("dlq", "dlq")],
)
def test_the_rule_goes_both_ways(snake: str, camel: str) -> None:
    assert spec.camel_case(snake) == camel
    assert spec.snake_case(camel) == snake
