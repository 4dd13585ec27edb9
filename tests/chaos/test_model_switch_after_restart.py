"""A model switch sent after the broker restarted reaches every replica, under load.

The wine classifier (2 replicas, at-least-once) serves an embedded model v1 while records
stream in. The broker is restarted (SIGTERM, and ``kill -9``), and only then is v2
pushed on the control topic. Both are the ONNX graphs of the wine model: the kind is
beside the point here, and ONNX spares each replica a TensorFlow. Every replica must
switch to v2 without being restarted: each has one control consumer, assigned its
partitions, and a consumer of that kind can stop fetching after a broker restart
(confluentinc/librdkafka#5153); the control reader makes it again when committed
descriptors wait past it for 30 s. Every id is predicted, and every record sent after
both replicas said they serve v2 is predicted by v2.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from streamflow.blueprint.model import Application
from tests.chaos import harness, traffic
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k
from tests.streamlets.serving import serving_support as s
from tests.toxiproxy_fixtures import ProxiedKafka

N = 2_000  # before the switch, paced through the restart
AFTER = 400  # sent once both replicas serve v2
RATE = 200.0
pytestmark = pytest.mark.timeout(900)


def _missing(bootstrap: str, app: Application, out: set[str]) -> str:
    """Where the ids that never came out are: in the input or not, and how far the
    classifier's group has committed on it (a lost record and a stalled replica differ)."""
    missing = {f"w{i}" for i in range(N + AFTER)} - out
    codec = k.codec_of("examples.wine.WineFeatures")
    features = support.topic(app, "features")
    sent = support.consume_until(bootstrap, features, lambda r: False, timeout=5)
    where = {codec.decode(m.value())["id"]: (m.partition(), m.offset()) for m in sent}
    lag = traffic.group_lag(bootstrap, app.consumer_group("classifier"), features)
    first = sorted(missing, key=lambda i: int(i[1:]))[:10]
    return (
        f"{len(missing)} ids never came out, {len(missing & set(where))} of them in the input "
        f"(first: {[(i, where.get(i)) for i in first]}); the classifier's group has "
        f"{lag} input records not committed"
    )


@pytest.mark.parametrize("hard", [False, True], ids=["graceful", "kill-9"])
def test_a_model_switch_after_a_broker_restart_reaches_every_replica(
    proxied_kafka: ProxiedKafka,
    tmp_path: Path,
    wine_models: WineModels,
    chaos_table: list[harness.Row],
    hard: bool,
) -> None:
    created = time.monotonic()
    bootstrap = proxied_kafka.direct
    app = k.app(bootstrap, 2, tmp_path / "cache")
    features = support.topic(app, "features")
    out_topic = support.topic(app, "predictions")
    rows = k.features(wine_models, N + AFTER)
    k.push(bootstrap, app, s.descriptor(1, "ONNX", data=wine_models.v1.onnx_file.read_bytes()))
    with support.replicas(app, tmp_path) as running:
        replicas = [running.start("classifier", i) for i in range(2)]
        k.wait_until_serving(bootstrap, app, 1, 2)
        feeder = k.produce_paced(bootstrap, features, rows[:N], rate=RATE)
        support.consume_until(bootstrap, out_topic, support.count_at_least(N // 4), timeout=120)
        proxied_kafka.broker.restart(hard=hard)  # returns once the broker answers again
        back_at = time.time()
        k.push(bootstrap, app, s.descriptor(2, "ONNX", data=wine_models.v2.onnx_file.read_bytes()))
        k.wait_until_serving(bootstrap, app, 2, 2)
        switched_s = time.time() - back_at
        feeder.join(120)
        support.produce(bootstrap, features, rows[N:])
        codec = k.codec_of("examples.wine.WinePrediction")
        out = support.consume_until(
            bootstrap,
            out_topic,
            lambda records: len({codec.decode(m.value())["id"] for m in records}) >= N + AFTER,
            timeout=180,
        )
        dead = support.consume_until(
            bootstrap, app.dlq_topic("classifier"), lambda r: False, timeout=1
        )
        restarts = sum(r.restarts for r in replicas)
        log = running.log()
    values = [codec.decode(m.value()) for m in out]
    ids = Counter(v["id"] for v in values)
    late = {v["id"]: v["model_version"] for v in values if int(v["id"][1:]) >= N}
    everything = set(ids) == {f"w{i}" for i in range(N + AFTER)}
    chaos_table.append(
        harness.Row(
            scenario=f"model switch after broker {'kill -9' if hard else 'restart'}",
            guarantee="at-least-once",
            records_in=N + AFTER,
            out=len(ids),
            duplicates=sum(ids.values()) - len(ids),
            dead_letters=len(dead),
            restarts=restarts,
            recover_s=switched_s,  # from the broker's return to both replicas serving v2
            caught_up_s=None,
            took_s=time.monotonic() - created,
            passed=everything and not dead and set(late.values()) == {2},
        )
    )
    assert everything, _missing(bootstrap, app, set(ids)) + "\n" + log
    assert not dead, [dict(m.headers() or ()) for m in dead[:3]]
    assert set(late.values()) == {2}, f"records sent after the switch served by {late}\n{log}"
    assert restarts == 0, log
