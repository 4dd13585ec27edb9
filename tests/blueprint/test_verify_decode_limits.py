"""``decode_limits:`` of a streamlet: checked when the blueprint is verified, sent to replicas."""

from __future__ import annotations

from streamflow.blueprint.model import Application
from streamflow.schema.bounds import DEFAULT_LIMITS, DecodeLimits
from tests.blueprint.bp_helpers import only, verify, where


def blueprint(limits: str) -> str:
    return (
        "name: app\n"
        "schemas: [schemas]\n"
        "streamlets:\n"
        "  source:\n"
        "    class: bp_fixture_streamlets:Source\n"
        "  sink:\n"
        "    class: bp_fixture_streamlets:Sink\n"
        f"    decode_limits: {limits}\n"
        "topics:\n"
        "  readings:\n"
        "    producers: [source.out]\n"
        "    consumers: [sink.in]\n"
    )


def test_limits_reach_the_application_and_survive_its_plain_data() -> None:
    result = verify(blueprint("{max_items: 5000, max_record_bytes: 16Mi}"))
    assert result.problems == []
    app = result.application
    assert app is not None
    limits = app.streamlets["sink"].decode_limits
    assert limits == DecodeLimits(max_items=5000, max_record_bytes=16 << 20)
    assert limits.max_batch_bytes == DEFAULT_LIMITS.max_batch_bytes  # unset: the default
    assert app.streamlets["source"].decode_limits is DEFAULT_LIMITS
    again = Application.from_dict(app.to_dict())
    assert again.streamlets["sink"].decode_limits == limits
    assert "decode_limits" not in app.to_dict()["streamlets"]["source"]  # defaults not written


def test_a_limit_that_is_not_a_whole_number_is_a_problem_at_its_position() -> None:
    problem = only(verify(blueprint("{max_record_bytes: lots}")), "invalid-decode-limit")
    assert "sink.decode_limits.max_record_bytes must be a whole number" in problem.message
    assert "64Mi" in problem.message
    assert where(problem) == (8, 39)
    assert only(verify(blueprint("{max_items: 0}")), "invalid-decode-limit")
    assert only(verify(blueprint("{max_items: 1Ki}")), "invalid-decode-limit")  # a count, not bytes


def test_a_batch_limit_under_the_record_limit_is_a_problem() -> None:
    result = verify(blueprint("{max_record_bytes: 32Mi, max_batch_bytes: 16Mi}"))
    problem = only(result, "invalid-decode-limit")
    assert "would fit no batch" in problem.message
    assert result.application is None


def test_an_unknown_field_hints_at_the_right_one() -> None:
    problem = only(verify(blueprint("{max_item: 10}")), "unknown-field")
    assert "max_items" in problem.hint
    assert "must be a mapping" in only(verify(blueprint("64Mi")), "wrong-type").message
