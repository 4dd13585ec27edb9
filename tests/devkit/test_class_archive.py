"""A JVM that records its class archive is given the time to write it as it stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamflow import devkit
from streamflow.devkit import KafkaBroker, _local
from streamflow.devkit.java import RECORDING_STOP_GRACE_S, ClassArchive


def test_a_recording_jvm_may_take_longer_to_stop_and_a_kill_stays_a_kill() -> None:
    part = Path("kafka-0123.jsa.abc.part")
    assert ClassArchive.stop_grace(15.0, part) == RECORDING_STOP_GRACE_S > 60
    assert ClassArchive.stop_grace(15.0, None) == 15.0
    assert ClassArchive.stop_grace(0.0, part) == 0.0


def test_the_first_broker_to_stop_is_given_the_recording_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in a CI run loaded 6 times over: the archive (about 3.7 CPU s to write) took
    longer than the 15 s stop grace, the JVM was killed, and no archive was left."""
    lib = devkit.find_kafka_lib()  # before the cache moves
    monkeypatch.setenv("STREAMFLOW_CACHE_DIR", str(tmp_path / "cache"))
    graces: list[float] = []
    real = _local.terminate

    def terminate(process: Any, *, grace: float) -> None:
        graces.append(grace)
        real(process, grace=grace)

    monkeypatch.setattr(_local, "terminate", terminate)
    broker = KafkaBroker(lib_dir=lib)
    broker.start()
    broker.stop()  # the first: it records
    assert graces == [RECORDING_STOP_GRACE_S]
    assert len(list((tmp_path / "cache" / "jvm").glob("*.jsa"))) == 1
    broker = KafkaBroker(lib_dir=lib)
    broker.start()
    broker.stop()  # it maps the archive, and records nothing
    assert graces[1] < RECORDING_STOP_GRACE_S
