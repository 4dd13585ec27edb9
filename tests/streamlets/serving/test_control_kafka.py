"""The control topic's refusals as an operator sees them: ModelStatus records on the real broker.

One replica, three hostile pushes through Kafka: a SavedModel to a streamlet
that does not accept them, a model server whose error page holds a secret,
and a download that drips while a newer version arrives. Each must end in a
status record that says why in our words (none of the server's), and the
newer version must serve.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from streamflow.models.artifacts import pack_directory
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k
from tests.streamlets.serving import serving_support as s
from tests.streamlets.serving.hostile_servers import hostile

SECRET = "SECRET-kafka-7d1e"


def _final_states(bootstrap: str, topic: str, wanted: set[int]) -> dict[int, dict[str, Any]]:
    codec = k.codec_of("streamflow.ml.ModelStatus")
    final: dict[int, dict[str, Any]] = {}

    def done(records: list[Message]) -> bool:
        for value in (codec.decode(m.value()) for m in records):
            if value["state"] != "loading":
                final.setdefault(value["version"], value)
        return wanted <= final.keys()

    support.consume_until(bootstrap, topic, done, timeout=120)
    return final


def test_hostile_descriptors_on_the_control_topic_end_in_clear_statuses(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    app = k.app(kafka_bootstrap, 1, tmp_path / "cache")
    drip_body = b"z" * 60
    with hostile() as server, support.replicas(app, tmp_path) as running:
        server.body("/v2/models/wine/ready", SECRET.encode(), status=503)
        server.drip("/v3.keras", drip_body, every=0.5)
        running.start("classifier", 0)
        saved = pack_directory(wine_models.v2.saved_model)
        k.push(kafka_bootstrap, app, s.descriptor(1, "TF_SAVED_MODEL", data=saved))
        k.push(kafka_bootstrap, app, s.descriptor(2, "OPEN_INFERENCE_V2", location=server.url))
        status_topic = support.topic(app, "status")
        _final_states(kafka_bootstrap, status_topic, {1, 2})  # before v3, which would supersede
        slow = s.descriptor(
            3,
            "KERAS",
            location=server.url + "/v3.keras",
            sha256=hashlib.sha256(drip_body).hexdigest(),
        )
        k.push(kafka_bootstrap, app, slow)
        keras = wine_models.v1.keras_file.read_bytes()
        k.push(kafka_bootstrap, app, s.descriptor(4, "KERAS", data=keras))
        final = _final_states(kafka_bootstrap, status_topic, {1, 2, 3, 4})
        log = running.log()
    assert final[1]["state"] == "rejected" and "allow_saved_model" in final[1]["message"], log
    assert final[2]["state"] == "failed" and "HTTP 503" in final[2]["message"], final[2]
    assert SECRET not in final[2]["message"]
    assert final[3]["state"] == "superseded", final[3]
    assert final[4]["state"] == "serving", final[4]
