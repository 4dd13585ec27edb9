"""Control inlets are broadcast to every replica and replayed before data."""

from __future__ import annotations

from pathlib import Path

from tests.runtime import support


def _applied(bootstrap: str, topic: str, want: set[tuple[int, int]]) -> list:  # type: ignore[type-arg]
    codec = support.codec("tests.runtime.Applied")

    def done(records: list) -> bool:  # type: ignore[type-arg]
        seen = {
            (v["replica"], v["version"]) for v in map(codec.decode, (m.value() for m in records))
        }
        return want <= seen

    return [codec.decode(m.value()) for m in support.consume_until(bootstrap, topic, done)]


def test_every_replica_applies_every_control_record_and_late_replicas_catch_up(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = support.make_app(
        kafka_bootstrap,
        streamlets={"ctl": {"class": "apps:Controlled", "replicas": 2}},
        topics={
            "in": {"consumers": ["ctl.in"], "partitions": 2},
            "factor": {"consumers": ["ctl.factor"], "config": {"cleanup.policy": "compact"}},
            "out": {"producers": ["ctl.out"], "partitions": 2},
            "applied": {"producers": ["ctl.applied"]},
        },
    )
    factor = support.codec("tests.runtime.Factor")
    factor_topic = support.topic(app, "factor")
    applied_topic = support.topic(app, "applied")
    support.produce(
        kafka_bootstrap, factor_topic, [("f", factor.encode({"version": 1, "factor": 2.0}))]
    )
    with support.replicas(app, tmp_path) as running:
        running.start("ctl", 0)
        running.start("ctl", 1)
        _applied(kafka_bootstrap, applied_topic, {(0, 1), (1, 1)})
        support.produce(
            kafka_bootstrap,
            factor_topic,
            [("f", factor.encode({"version": v, "factor": float(v)})) for v in (2, 3)],
        )
        _applied(kafka_bootstrap, applied_topic, {(r, v) for r in (0, 1) for v in (1, 2, 3)})

        support.produce(kafka_bootstrap, support.topic(app, "in"), support.readings(200))
        running.start("ctl", 2)  # a replica that starts later
        records = _applied(kafka_bootstrap, applied_topic, {(2, 3)})
        out = support.consume_until(
            kafka_bootstrap, support.topic(app, "out"), support.count_at_least(200)
        )
        log = running.log()

    late = [r for r in records if r["replica"] == 2]
    assert late and all(r["before_data"] for r in late), log
    assert late[-1]["version"] == 3
    scaled = [support.codec("tests.runtime.Scaled").decode(m.value()) for m in out]
    assert all(s["factor_version"] == 3 for s in scaled)
    assert all(s["value"] == s["seq"] * 3.0 for s in scaled)
