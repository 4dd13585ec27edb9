"""On the real broker: serving, drift and explanation across a model switch; an explainer outage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from streamflow.blueprint.model import Application
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.drift.hosted import Hosted
from tests.streamlets.explain import explain_support as e
from tests.streamlets.serving import serving_support as s
from tests.waiting import wait_until

STORE = SchemaStore([s.SCHEMAS])


def _codec(name: str) -> SingleObjectCodec:
    return SingleObjectCodec(STORE.get(name), store=STORE)


def _app(bootstrap: str, cache: Path, baseline: list[float]) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={
            "classifier": {
                "class": "classifier_app:WineClassifier",
                "config": {**s.CONFIG, "cache_dir": str(cache)},
            },
            "drift": {
                "class": "monitoring_app:WineDrift",
                "config": {"numeric": s.FEATURES, "window": 100, "reference_size": 200},
            },
            "explain": {
                "class": "monitoring_app:WineExplainer",
                "config": {
                    "input_fields": s.FEATURES,
                    "sample_rate": 1.0,
                    "baseline_values": baseline,  # so no record waits for a background
                    "steps": 64,
                    "budget": "10s",
                    "cache_dir": str(cache),
                },
            },
        },
        topics={
            # one partition: the detector's windows are per input partition, and this
            # test counts every record into exactly one window of one sequence
            "features": {"consumers": ["classifier.in", "drift.in", "explain.in"]},
            "models": {
                "consumers": ["classifier.model", "drift.model", "explain.model"],
                "config": {"cleanup.policy": "compact"},
            },
            "predictions": {"producers": ["classifier.out"], "consumers": ["drift.outputs"]},
            "status": {"producers": ["classifier.status", "explain.status", "drift.status"]},
            "drift-config": {"consumers": ["drift.control"]},
            "reports": {"producers": ["drift.reports"]},
            "alerts": {"producers": ["drift.alerts"], "consumers": ["explain.drift"]},
            "explanations": {"producers": ["explain.out"]},
        },
        schema_paths=[s.SCHEMAS],
        python_paths=[s.WINE],
    )


def _features(models: WineModels, start: int, n: int) -> list[tuple[str | None, bytes]]:
    codec = _codec("examples.wine.WineFeatures")
    out: list[tuple[str | None, bytes]] = []
    for i in range(start, start + n):
        row = models.x[i % len(models.x)]
        value = {"id": f"w{i}", "label": int(models.y[i % len(models.x)])}
        value.update({f: float(row[j]) for j, f in enumerate(s.FEATURES)})
        out.append((f"w{i}", codec.encode(value)))
    return out


def _decoded(bootstrap: str, app: Application, topic: str, schema: str, n: int) -> list[Any]:
    records = support.consume_until(
        bootstrap, support.topic(app, topic), support.count_at_least(n), timeout=120
    )
    codec = _codec(schema)
    return [codec.decode(m.value()) for m in records]


def _predicted(bootstrap: str, app: Application, n: int) -> None:
    support.consume_until(
        bootstrap, support.topic(app, "predictions"), support.count_at_least(n), timeout=120
    )


def _serving_everywhere(bootstrap: str, app: Application, version: int) -> None:
    codec = _codec("streamflow.ml.ModelStatus")

    def done(records: list[Any]) -> bool:
        states = [codec.decode(m.value()) for m in records]
        serving = {
            v["replica"] for v in states if v["version"] == version and v["state"] == "serving"
        }
        return {"classifier-0", "explain-0"} <= serving

    support.consume_until(bootstrap, support.topic(app, "status"), done, timeout=90)


def test_a_model_switch_reaches_reports_and_explanations_and_nothing_is_lost(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    half = 600
    app = _app(kafka_bootstrap, tmp_path / "cache", wine_models.x.mean(axis=0).tolist())
    models = support.topic(app, "models")
    descriptor = _codec("streamflow.ml.ModelDescriptor")
    v1 = s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes())
    support.produce(kafka_bootstrap, models, [("wine", descriptor.encode(v1))])
    features = support.topic(app, "features")
    with support.replicas(app, tmp_path) as running:
        for name in ("classifier", "drift", "explain"):
            running.start(name)
        _serving_everywhere(kafka_bootstrap, app, 1)
        support.produce(kafka_bootstrap, features, _features(wine_models, 0, half))
        # a record is served by the model serving when the classifier takes it: wait for
        # both consumers of the first half (the explainer's and the classifier's) before
        # the switch, or a slow classifier would serve it with version 2
        _decoded(kafka_bootstrap, app, "explanations", "streamflow.ml.Explanation", half)
        _predicted(kafka_bootstrap, app, half)
        v2 = s.descriptor(2, "KERAS", data=wine_models.v2.keras_file.read_bytes())
        support.produce(kafka_bootstrap, models, [("wine", descriptor.encode(v2))])
        _serving_everywhere(kafka_bootstrap, app, 2)
        support.produce(kafka_bootstrap, features, _features(wine_models, half, half))
        explanations = _decoded(
            kafka_bootstrap, app, "explanations", "streamflow.ml.Explanation", 2 * half
        )
        reports = _decoded(
            kafka_bootstrap,
            app,
            "reports",
            "streamflow.ml.DriftReport",
            2 * (2 * half - 200) // 100,
        )
        dead = [
            m
            for name in ("classifier", "drift", "explain")
            for m in support.consume_until(
                kafka_bootstrap, app.dlq_topic(name), lambda r: False, timeout=1
            )
        ]
        log = running.log()
    assert not dead, log
    # every record explained once, by the model serving when it arrived
    ids = sorted(int(str(v["key"])[1:]) for v in explanations)
    assert ids == list(range(2 * half)), log
    by_id = {int(str(v["key"])[1:]): v for v in explanations}
    assert {by_id[i]["model_version"] for i in range(half)} == {1}
    assert {by_id[i]["model_version"] for i in range(half, 2 * half)} == {2}
    expected = {
        1: wine_models.v1.model.predict(wine_models.x, verbose=0),
        2: wine_models.v2.model.predict(wine_models.x, verbose=0),
    }
    for i, v in by_id.items():
        np.testing.assert_allclose(
            v["prediction"], expected[v["model_version"]][i % len(wine_models.x)], atol=1e-4
        )
        total = sum(a["attribution"] for a in v["attributions"])
        gap = v["prediction"][v["target"]] - v["baseline_prediction"] - total
        assert abs(gap) < 0.02  # completeness, up to the 64-step quadrature
    # every record in one window (after the first 200, the reference), versions in order
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for report in reports:
        by_source[report["source"]].append(report)
    for source, windows in by_source.items():
        windows.sort(key=lambda r: r["window"]["index"])
        assert [r["window"]["index"] for r in windows] == list(range(10)), source
        assert sum(r["window"]["records"] for r in windows) == 2 * half - 200
        versions = [r["model_version"] for r in windows]
        assert versions == sorted(versions) and versions[-1] == 2 and versions[0] == 1, source


def _backpressure(port: int) -> float:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streamflow_errors_total") and 'kind="backpressure"' in line
    )


def test_a_remote_explainer_outage_pauses_explaining_and_loses_nothing(
    kafka_bootstrap: str,
    tmp_path: Path,
    hosted_models: Callable[..., AbstractContextManager[Hosted]],
) -> None:
    weights, baseline = e.WEIGHTS[:, 0].tolist(), [0.5, -1.0]
    with hosted_models(
        tmp_path, reference=np.zeros((4, 2)), weights=weights, baseline=baseline
    ) as server:
        app = support.make_app(
            kafka_bootstrap,
            streamlets={
                "explain": {
                    "class": "tests.streamlets.explain.explain_support:PointExplainer",
                    "config": {
                        "input_fields": e.FEATURES,
                        "method": "remote",
                        "explainer_url": server.url,
                        "explainer_model": "explainer",
                        "sample_rate": 1.0,
                        "target": 0,
                        "retries": 0,
                        "breaker_cooldown": "1s",
                        "cache_dir": str(tmp_path / "cache"),
                    },
                }
            },
            topics={
                "points": {"consumers": ["explain.in"], "partitions": 2},
                "models": {"consumers": ["explain.model"], "config": {"cleanup.policy": "compact"}},
                "explanations": {"producers": ["explain.out"]},
                "status": {"producers": ["explain.status"]},
            },
            schema_paths=[e.SCHEMAS],
            python_paths=[s.ROOT],
        )
        model = e.descriptor(1, e.linear_model(tmp_path / "linear.keras", outputs=1))
        codec = SingleObjectCodec(STORE.get("streamflow.ml.ModelDescriptor"), store=STORE)
        support.produce(kafka_bootstrap, support.topic(app, "models"), [("m", codec.encode(model))])
        points = SingleObjectCodec(SchemaStore([e.SCHEMAS]).get("tests.drift.Point"))
        batches = [e.points(150, seed=1), e.points(150, seed=2, start=150)]
        topic = support.topic(app, "points")
        with support.replicas(app, tmp_path) as running:
            replica = running.start("explain")
            support.produce(
                kafka_bootstrap, topic, [(p["id"], points.encode(p)) for p in batches[0]]
            )
            _decoded(kafka_bootstrap, app, "explanations", "streamflow.ml.Explanation", 150)
            server.stop()
            support.produce(
                kafka_bootstrap, topic, [(p["id"], points.encode(p)) for p in batches[1]]
            )
            wait_until(
                lambda: _backpressure(replica.health_port) >= 2,
                timeout=60,
                what="the replica to back off while the explainer is down",
            )
            server.restart()
            explanations = _decoded(
                kafka_bootstrap, app, "explanations", "streamflow.ml.Explanation", 300
            )
            dead = support.consume_until(
                kafka_bootstrap, app.dlq_topic("explain"), lambda r: False, timeout=1
            )
            assert replica.restarts == 0 and not dead, running.log()
            assert "the remote explainer" in running.log() and "is unavailable" in running.log()
    assert sorted(v["key"] for v in explanations) == sorted(p["id"] for b in batches for p in b)
    for v in explanations:
        x = np.array([a["value"] for a in v["attributions"]])
        np.testing.assert_allclose(
            [a["attribution"] for a in v["attributions"]],
            np.array(weights) * (x - baseline),
            atol=1e-5,
        )
