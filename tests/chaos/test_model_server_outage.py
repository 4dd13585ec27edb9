"""A model-server outage under load: the serving streamlet backs off while KServe is down
and serves again when it is back; no id is lost, none doubled under exactly-once.

The wine classifier (2 replicas) serves through the real KServe model server (Open
Inference V2). Mid-stream the server is killed for at least 5 s and restarted. A
replica that cannot reach it raises ``Backpressure``: the batch is rewound and retried,
nothing is dead-lettered and nothing restarts. Counting is by the prediction's ``id``
(the records' keys repeat), ``read_committed``. The fault ends when the server answers
again; *recover* is from there to the first prediction written after it (by the
records' own timestamps), *caught up* to the last one.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import harness
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k
from tests.streamlets.serving import serving_support as s

GUARANTEES = ["at-least-once", "exactly-once"]
N = 4_000
RATE = 400.0


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_model_server_outage_under_load(
    kafka_bootstrap: str,
    tmp_path: Path,
    wine_models: WineModels,
    model_server_factory: Any,
    chaos_table: list[harness.Row],
    guarantee: str,
) -> None:
    created = time.monotonic()
    server = model_server_factory(
        model_path=wine_models.v1.keras_file, model_name="wine", model_version="1"
    )
    app = support.make_app(
        kafka_bootstrap,
        streamlets={
            "classifier": {
                "class": "classifier_app:WineClassifier",
                "replicas": 2,
                "guarantee": guarantee,
                "config": {**s.CONFIG, "cache_dir": str(tmp_path / "cache")},
            }
        },
        topics={
            "features": {"consumers": ["classifier.in"], "partitions": 4},
            "models": {"consumers": ["classifier.model"], "config": {"cleanup.policy": "compact"}},
            "predictions": {"producers": ["classifier.out"], "partitions": 4},
            "status": {"producers": ["classifier.status"]},
        },
        schema_paths=k.STORE_PATHS,
        python_paths=[s.WINE],
    )
    out_topic = support.topic(app, "predictions")
    k.push(kafka_bootstrap, app, s.descriptor(1, "OPEN_INFERENCE_V2", location=server.url))
    with support.replicas(app, tmp_path) as running:
        replicas = [running.start("classifier", i) for i in range(2)]
        k.wait_until_serving(kafka_bootstrap, app, 1, 2)
        feeder = k.produce_paced(
            kafka_bootstrap,
            support.topic(app, "features"),
            k.features(wine_models, N),
            rate=RATE,
        )
        support.consume_until(kafka_bootstrap, out_topic, support.count_at_least(N // 4))
        server.kill()
        down_since = time.monotonic()
        support.wait_for(
            lambda: time.monotonic() - down_since >= 5,
            timeout=30,
            message="the outage's 5 s",  # the fault's length, not a synchronisation
        )
        server.restart()  # returns once the server answers again
        back_at = time.time()
        feeder.join(120)
        codec = k.codec_of("examples.wine.WinePrediction")
        out = support.consume_until(
            kafka_bootstrap,
            out_topic,
            lambda records: len({codec.decode(m.value())["id"] for m in records}) >= N,
            timeout=180,
        )
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("classifier"), lambda r: False, timeout=1
        )
        restarts = sum(r.restarts for r in replicas)
        log = running.log()
    ids = Counter(codec.decode(m.value())["id"] for m in out)
    after = sorted(m.timestamp()[1] / 1000 for m in out if m.timestamp()[1] / 1000 >= back_at)
    row = harness.Row(
        scenario="model server down 5 s",
        guarantee=guarantee,
        records_in=N,
        out=len(ids),
        duplicates=sum(ids.values()) - len(ids),
        dead_letters=len(dead),
        restarts=restarts,
        recover_s=after[0] - back_at if after else None,
        caught_up_s=after[-1] - back_at if after else None,
        took_s=time.monotonic() - created,
        passed=set(ids) == {f"w{i}" for i in range(N)}
        and not dead
        and (guarantee != "exactly-once" or all(n == 1 for n in ids.values())),
        stuck_bound_s=harness.stuck_bound_s(guarantee),
    )
    chaos_table.append(row)
    assert set(ids) == {f"w{i}" for i in range(N)}, log
    assert not dead, "a model server outage must not dead-letter anything"
    assert restarts == 0, log
    if guarantee == "exactly-once":
        doubled = {i for i, n in ids.items() if n > 1}
        copies = [
            (codec.decode(m.value())["id"], m.partition(), m.offset(), m.timestamp()[1])
            for m in out
            if codec.decode(m.value())["id"] in doubled
        ]
        assert not doubled, f"ids predicted twice under exactly-once: {sorted(copies)}\n{log}"
