"""``resources:`` of a streamlet: Kubernetes quantities, checked when the blueprint is verified."""

from __future__ import annotations

from streamflow.blueprint.verify_resources import quantity_value
from tests.blueprint.bp_helpers import only, verify, where


def blueprint(resources: str) -> str:
    return (
        "name: app\n"
        "schemas: [schemas]\n"
        "streamlets:\n"
        "  source:\n"
        "    class: bp_fixture_streamlets:Source\n"
        f"    resources: {resources}\n"
        "  sink:\n"
        "    class: bp_fixture_streamlets:Sink\n"
        "topics:\n"
        "  readings:\n"
        "    producers: [source.out]\n"
        "    consumers: [sink.in]\n"
    )


def test_resources_reach_the_application() -> None:
    result = verify(blueprint("{requests: {cpu: 250m, memory: 512Mi}, limits: {memory: 1Gi}}"))
    assert result.problems == []
    assert result.application is not None
    assert result.application.streamlets["source"].resources == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert result.application.streamlets["sink"].resources is None


def test_a_quantity_kubernetes_would_refuse_is_a_problem_at_its_position() -> None:
    problem = only(verify(blueprint("{limits: {memory: 1GB}}")), "invalid-resources")
    assert "source.resources.limits.memory is not a Kubernetes quantity" in problem.message
    assert where(problem) == (6, 34)
    assert "Mi" in problem.hint


def test_a_request_above_its_limit_is_a_problem() -> None:
    result = verify(blueprint("{requests: {memory: 2Gi}, limits: {memory: 1Gi}}"))
    problem = only(result, "invalid-resources")
    assert "memory request (2Gi) is above its limit (1Gi)" in problem.message
    assert result.application is None


def test_unknown_fields_and_resources_hint_at_the_right_one() -> None:
    assert "limits" in only(verify(blueprint("{limit: {cpu: 1}}")), "unknown-field").hint
    assert "memory" in only(verify(blueprint("{limits: {memroy: 1Gi}}")), "unknown-field").hint


def test_quantities_are_read_as_kubernetes_reads_them() -> None:
    assert quantity_value("1Gi") == 1024**3
    assert quantity_value("500m") == quantity_value("0.5")
    assert quantity_value("1G") == 1000**3
    assert quantity_value("-1") is None and quantity_value("lots") is None
