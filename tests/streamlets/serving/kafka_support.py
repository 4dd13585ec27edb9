"""The serving streamlet's tests on the real broker share these: the wine app, its
codecs, a paced feeder, the model descriptors pushed and the statuses awaited."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from streamflow.blueprint.model import Application
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import serving_support as s

STORE_PATHS = [s.SCHEMAS]


def app(
    bootstrap: str,
    replicas: int,
    cache: Path,
    *,
    guarantee: str = "at-least-once",
    shadow: bool = False,
    **config: Any,
) -> Application:
    """The wine classifier's app; ``shadow``: with a topic for its shadow outlet."""
    shadow_topic = {"shadows": {"producers": ["classifier.shadow"], "partitions": 4}}
    return support.make_app(
        bootstrap,
        streamlets={
            "classifier": {
                "class": "classifier_app:WineClassifier",
                "replicas": replicas,
                "guarantee": guarantee,
                "config": {
                    **s.CONFIG,
                    "cache_dir": str(cache),
                    "breaker_cooldown": "1s",
                    **config,
                },
            }
        },
        topics={
            "features": {"consumers": ["classifier.in"], "partitions": 4},
            "models": {"consumers": ["classifier.model"], "config": {"cleanup.policy": "compact"}},
            "predictions": {"producers": ["classifier.out"], "partitions": 4},
            "status": {"producers": ["classifier.status"]},
            **(shadow_topic if shadow else {}),
        },
        schema_paths=STORE_PATHS,
        python_paths=[s.WINE],
    )


def codec_of(name: str) -> Any:
    from streamflow.schema import SchemaStore, SingleObjectCodec

    store = SchemaStore(STORE_PATHS)
    return SingleObjectCodec(store.get(name), store=store)


def features(models: WineModels, n: int, *, keys: int = 200) -> list[tuple[str, bytes]]:
    codec = codec_of("examples.wine.WineFeatures")
    out = []
    for i in range(n):
        row = i % len(models.x)
        value = {"id": f"w{i}", "label": int(models.y[row])}
        value.update({f: float(models.x[row][j]) for j, f in enumerate(s.FEATURES)})
        out.append((f"k{i % keys}", codec.encode(value)))
    return out


def push(bootstrap: str, app: Application, descriptor: dict[str, Any]) -> None:
    codec = codec_of("streamflow.ml.ModelDescriptor")
    support.produce(bootstrap, support.topic(app, "models"), [("wine", codec.encode(descriptor))])


def statuses(bootstrap: str, app: Application) -> list[dict[str, Any]]:
    codec = codec_of("streamflow.ml.ModelStatus")
    records = support.consume_until(
        bootstrap, support.topic(app, "status"), lambda r: False, timeout=2
    )
    return [codec.decode(m.value()) for m in records]


def wait_until_serving(bootstrap: str, app: Application, version: int, replicas: int) -> None:
    def done(records: list[Message]) -> bool:
        codec = codec_of("streamflow.ml.ModelStatus")
        values = [codec.decode(m.value()) for m in records]
        return (
            len(
                {
                    v["replica"]
                    for v in values
                    if v["version"] == version and v["state"] == "serving"
                }
            )
            >= replicas
        )

    records = support.consume_until(bootstrap, support.topic(app, "status"), done, timeout=90)
    if not done(records):  # consume_until returns at its timeout: here that is a failure
        codec = codec_of("streamflow.ml.ModelStatus")
        seen = [
            (v["replica"], v["version"], v["state"])
            for v in map(codec.decode, (m.value() for m in records))
        ]
        raise AssertionError(
            f"{replicas} replica(s) never all said they serve version {version} in 90 s; "
            f"the statuses: {seen[-20:]}"
        )


def produce_paced(
    bootstrap: str, topic: str, items: list[tuple[str, bytes]], rate: float
) -> threading.Thread:
    def run() -> None:
        chunk = max(1, int(rate / 10))
        started = time.monotonic()
        for index in range(0, len(items), chunk):
            support.produce(bootstrap, topic, items[index : index + chunk])
            ahead = started + (index + chunk) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing the load generator, not synchronising the test

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
