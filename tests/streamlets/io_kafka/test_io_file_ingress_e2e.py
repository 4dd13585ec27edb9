"""FileIngress following a file under the runtime: appended lines arrive, in order.

KAFKA_E2E.md item 5.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.streamlets.io_kafka import iohelpers as h


def _lines(*seqs: int) -> str:
    return "".join(json.dumps(h.event(seq)) + "\n" for seq in seqs)


def test_lines_appended_to_a_followed_file_arrive_in_order_and_a_bad_line_is_skipped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    feed = tmp_path / "feed.jsonl"
    feed.write_text(_lines(0, 1, 2))
    app = h.make_app(
        kafka_bootstrap,
        streamlets={
            "feed": {
                "class": "ioapps:EventFile",
                "config": {
                    "path": str(feed),
                    "follow": True,
                    "poll_interval": "50ms",
                    "key_field": "id",
                },
            }
        },
        topics={"events": {"producers": ["feed.out"]}},  # one partition: the file's order
    )
    events = h.topic(app, "events")
    decode = h.codec().decode

    def seqs() -> list[int]:
        return [decode(m.value())["seq"] for m in h.read_topic(kafka_bootstrap, events)]

    with h.replicas(app, tmp_path) as running:
        running.start("feed")
        h.wait(running, lambda: len(seqs()) >= 3, timeout=30, message="the first 3 lines")
        with feed.open("a") as f:
            f.write(_lines(3, 4))
        h.wait(running, lambda: len(seqs()) >= 5, timeout=30, message="the 2 lines appended")
        with feed.open("a") as f:  # line 6 is not JSON; line 7 misses a required field
            f.write(_lines(5) + "{not json\n" + '{"seq": 99}\n' + _lines(6, 7))
        h.wait(
            running,
            lambda: len(seqs()) >= 8,
            timeout=30,
            message="the good lines around the bad ones",
        )
        log = running.log()

    records = h.read_topic(kafka_bootstrap, events)
    assert [decode(m.value())["seq"] for m in records] == list(range(8)), log
    assert [m.key().decode() for m in records] == [h.event(i)["id"] for i in range(8)]
    assert f"{feed}:7: skipped: not valid JSON" in log
    assert f"{feed}:8: skipped:" in log and "id" in log.split(f"{feed}:8: skipped:")[1]
