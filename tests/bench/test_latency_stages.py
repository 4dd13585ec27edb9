"""The latency scenario splits each latency where the output reached the broker."""

from __future__ import annotations

import array
from pathlib import Path

import pytest

from bench import latency, loadgen

pytestmark = pytest.mark.unit


def test_each_latency_splits_at_the_brokers_append_of_its_output() -> None:
    # (sent, received, appended), in microseconds: appended 3-4 ms after it was sent, and
    # received 5 ms after it was sent
    measured = [(i * 1000, i * 1000 + 5000, i * 1000 + 3000 + (i % 2) * 1000) for i in range(200)]
    stages = latency._stages(measured)
    assert stages["before_p50_ms"] == pytest.approx(3.5, abs=0.5)
    assert stages["before_p99_ms"] == pytest.approx(4.0)
    assert stages["after_p50_ms"] == pytest.approx(1.5, abs=0.5)
    assert stages["after_p99_ms"] == pytest.approx(2.0)


def test_no_split_where_the_topic_does_not_stamp_the_append() -> None:
    assert latency._stages([(0, 5000, -1), (1000, 6000, -1)]) == {}


def test_the_probe_file_holds_sent_received_and_appended(tmp_path: Path) -> None:
    path = tmp_path / "probe"
    with path.open("wb") as out:
        array.array("q", [2]).tofile(out)
        for values in ([1, 2], [10, 20], [5, -1]):
            array.array("q", values).tofile(out)
    sent, received, appended = loadgen.read_probe(path)
    assert (list(sent), list(received), list(appended)) == ([1, 2], [10, 20], [5, -1])
