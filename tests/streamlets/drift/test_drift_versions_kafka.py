"""On the real broker: a detector that lags a model switch still labels every report correctly.

The detector is held back on purpose (:class:`drift_support.HeldDrift` takes no data until
it has applied the version-2 descriptor), so it reads every version-1 input and prediction
after it has learnt of version 2: the situation of a busy machine, made certain rather than
likely. Nothing waits on time: the test waits for the reports it expects, with a timeout.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from streamflow.blueprint.model import Application
from streamflow.schema import SchemaStore, SingleObjectCodec
from tests.runtime import support
from tests.streamlets.drift import drift_support as d

ROOT = Path(__file__).parents[3]
STORE = SchemaStore([d.SCHEMAS])


def _codec(name: str) -> SingleObjectCodec:
    return SingleObjectCodec(STORE.get(name), store=STORE)


def _app(bootstrap: str) -> Application:
    return support.make_app(
        bootstrap,
        streamlets={
            "drift": {
                "class": "tests.streamlets.drift.drift_support:HeldDrift",
                "config": {
                    "numeric": ["x", "y"],
                    "window": 100,
                    "reference_size": 100,
                    "hold_until": 2,
                },
            }
        },
        topics=d.kafka_topics(predictions=True),
        schema_paths=[d.SCHEMAS],
        python_paths=[ROOT],
    )


def _descriptor(version: int) -> bytes:
    return _codec("streamflow.ml.ModelDescriptor").encode(
        {
            "name": "points",
            "version": version,
            "kind": "KERAS",
            "data": b"unused",
            "location": None,
            "sha256": None,
            "parameters": {},
            "description": "",
            "created_at": dt.datetime.now(dt.UTC),
        }
    )


def _send(bootstrap: str, app: Application, start: int, count: int, version: int) -> None:
    """Inputs and the predictions a classifier serving ``version`` made of them, keyed alike.

    Half the predictions name their version in the ``streamflow-model`` header only, as
    serving does, the other half in their ``model_version`` field only.
    """
    points, predictions = _codec(d.POINT), _codec(d.PREDICTION)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for point in d.points(count, seed=start, start=start):
        index = int(point["id"][1:])
        producer.produce(support.topic(app, "points"), points.encode(point), point["id"])
        by_header = index % 2 == 0
        prediction = {
            "probabilities": [0.8, 0.1, 0.1],
            "predicted": 0,
            "model": "" if by_header else "points",
            "model_version": 0 if by_header else version,
        }
        producer.produce(
            support.topic(app, "predictions"),
            predictions.encode(prediction),
            point["id"],
            headers={"streamflow-model": f"points:{version}"} if by_header else None,
        )
    assert producer.flush(60) == 0


def _covered(report: dict[str, Any], topic: str) -> list[int]:
    spans = [o for o in report["window"]["offsets"] if o["topic"] == topic]
    return [i for span in spans for i in range(span["first"], span["last"] + 1)]


def test_a_detector_lagging_a_model_switch_labels_each_window_by_its_predictions(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    app = _app(kafka_bootstrap)
    models = support.topic(app, "models")
    support.produce(kafka_bootstrap, models, [("points", _descriptor(1))])
    made_by = [1] * 370 + [2] * 300  # record i (its input and its prediction) by version
    with support.replicas(app, tmp_path) as running:
        running.start("drift")
        _send(kafka_bootstrap, app, 0, 370, 1)  # the detector holds: it only knows v1 ...
        support.produce(kafka_bootstrap, models, [("points", _descriptor(2))])  # ... until now
        _send(kafka_bootstrap, app, 370, 300, 2)
        messages = support.consume_until(
            kafka_bootstrap, support.topic(app, "reports"), support.count_at_least(12), timeout=120
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("drift"), lambda r: False, timeout=1
        )
        log = running.log()
    assert not dead, log
    codec = _codec("streamflow.ml.DriftReport")
    reports = [codec.decode(m.value()) for m in messages]
    assert len(reports) == 12, log
    for source, topic in (("inputs", "points"), ("outputs", "predictions")):
        windows = sorted(
            (r for r in reports if r["source"] == source), key=lambda r: r["window"]["index"]
        )
        assert [r["window"]["index"] for r in windows] == list(range(6)), (source, log)
        # after the 100-record reference, 270 v1 records (the last 70 a window cut short at
        # the switch) and 300 v2 records
        assert [(r["model_version"], r["window"]["records"]) for r in windows] == [
            (1, 100),
            (1, 100),
            (1, 70),
            (2, 100),
            (2, 100),
            (2, 100),
        ], source
        covered: list[int] = []
        for report in windows:
            offsets = _covered(report, support.topic(app, topic))
            assert {made_by[i] for i in offsets} == {report["model_version"]}, (source, report)
            assert report["model"] == "points"
            assert report["model_version_from"] == "predictions"
            covered += offsets
        assert sorted(covered) == list(range(100, 670)), source
