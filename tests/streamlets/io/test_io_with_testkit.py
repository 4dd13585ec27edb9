"""The built-ins under the testkit harness: real Avro codecs on every port, strict schemas.

This is what a user's unit test of a pipeline using the built-ins looks like, and it
checks that what they emit survives the single-object codec the runtime uses.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamflow.schema import SchemaStore
from streamflow.streamlets.io import FileEgress, Generator
from streamflow.testkit import StreamletHarness

Feed = Generator.for_schema("iotest.Everything", name="Feed")
Sink = FileEgress.for_schema("iotest.Everything", name="Sink")


def harness(cls: type, store: SchemaStore, config: dict[str, object]) -> StreamletHarness:
    return StreamletHarness(cls, store=store, config=config)  # the store, as the runtime's


def test_generator_to_file_egress_through_avro(store: SchemaStore, tmp_path: Path) -> None:
    feed = harness(Feed, store, {"count": 25, "seed": 5, "key_field": "name"})
    outputs = feed.run_source(limit=100)
    feed.teardown()
    assert len(outputs) == 25
    assert all(o.key == o.value["name"] for o in outputs)

    path = tmp_path / "out.jsonl"
    sink = harness(Sink, store, {"path": str(path), "include_key": True})
    sink.feed("in", [o.value for o in outputs])
    sink.run()
    sink.teardown()
    assert sink.dead_letters == []
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [w["value"]["name"] for w in written] == [o.value["name"] for o in outputs]
    assert written[0]["value"]["uid"] == str(outputs[0].value["uid"])
