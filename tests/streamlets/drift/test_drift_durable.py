"""The detector's windows in its stores: read back whole after a restart, and written small.

The stores are the runtime's own (:class:`PartitionStore`); the changelog is a
list the test keeps, and "another machine" is a fresh store restored from it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamflow.api.streamlet import Record
from streamflow.runtime.state.store import PartitionStore
from streamflow.streamlets.drift import durable, sources, windows
from streamflow.streamlets.drift.settings import DriftSettings
from tests.streamlets.drift import drift_support as d
from tests.streamlets.drift.drift_support import points

_SETTINGS = DriftSettings(
    name="d", numeric=("x", "y"), categorical=("color",), window=40, step=40, reference_size=30
)
_Changelog = list[tuple[str, bytes | None]]


def _records(n: int, *, start: int, partition: int = 0) -> list[Record]:
    return [
        Record(p, key=p["id"], inlet="in", topic="in", partition=partition, offset=start + i)
        for i, p in enumerate(points(n, seed=start, start=start))
    ]


def _fresh(settings: DriftSettings = _SETTINGS) -> sources.Source:
    return sources.Source.start("inputs", settings, layout=settings.layout)


def _step(
    store: PartitionStore, tracked: durable.Tracked, records: list[Record], log: _Changelog
) -> tuple[durable.Tracked, list[windows.Window]]:
    """One batch: rows through the source, the change to the store, the store committed."""
    rows, refused = sources.input_rows(records, tracked.source)
    assert refused == 0
    after, done = tracked.source.absorb(rows, _SETTINGS)
    tracked = durable.save(store, tracked, after, settings=_SETTINGS, verdict=bool(done))
    log.extend(store.changes())
    store.commit()
    return tracked, [w for w, _ in done]


def _restored(path: Path, log: _Changelog) -> PartitionStore:
    store = PartitionStore(path, inlet="in", partition=0)
    store.restore(log, upto=len(log))
    return store


def _same(a: sources.Source, b: sources.Source) -> None:
    assert a.collect == b.collect and a.problem == b.problem
    assert (a.state.newest, a.state.index) == (b.state.newest, b.state.index)
    assert a.state.states.keys() == b.state.states.keys()
    for version, state in a.state.states.items():
        other = b.state.states[version]
        assert (state.seen, state.next_end, state.index) == (
            other.seen,
            other.next_end,
            other.index,
        )
        assert np.array_equal(state.buffer.numeric, other.buffer.numeric)
        assert state.buffer.categorical.tolist() == other.buffer.categorical.tolist()
        assert state.buffer.offset.tolist() == other.buffer.offset.tolist()
    assert (a.reference is None) == (b.reference is None)


def test_a_half_window_and_its_reference_come_back_whole_on_another_machine(
    tmp_path: Path,
) -> None:
    store = PartitionStore(tmp_path / "one.sqlite", inlet="in", partition=0)
    tracked, log = durable.load(store, _fresh(), _SETTINGS), []
    reported: list[windows.Window] = []
    offset = 0
    for size in (7, 25, 13, 31, 9):  # a reference of 30, one window of 40, then 15 more
        tracked, done = _step(store, tracked, _records(size, start=offset), log)
        reported += done
        offset += size
    assert [len(w.rows) for w in reported] == [40]
    elsewhere = durable.load(_restored(tmp_path / "two.sqlite", log), _fresh(), _SETTINGS)
    _same(tracked.source, elsewhere.source)
    assert elsewhere.source.reference is not None  # made again from its rows
    assert durable.verdict_of(elsewhere) == durable.verdict_of(tracked)
    # the next window is the one the first machine would have reported: the rows
    # from before the move included, every offset once
    moved = durable.load(_restored(tmp_path / "three.sqlite", log), _fresh(), _SETTINGS)
    rows, _ = sources.input_rows(_records(30, start=offset), moved.source)
    _, done = moved.source.absorb(rows, _SETTINGS)
    assert [w.rows.offset.tolist() for w, _ in done] == [list(range(70, 110))]


def test_the_changelog_grows_with_the_rows_not_with_the_window_per_batch(tmp_path: Path) -> None:
    big = DriftSettings(
        name="d", numeric=("x", "y"), categorical=("color",), window=2000, step=2000
    )
    store = PartitionStore(tmp_path / "s.sqlite", inlet="in", partition=0)
    tracked, log = durable.load(store, _fresh(big), big), []
    last: _Changelog = []
    for batch in range(40):  # a reference of 1,000 rows, then half a window, 50 at a time
        rows, _ = sources.input_rows(_records(50, start=batch * 50), tracked.source)
        after, _ = tracked.source.absorb(rows, big)
        tracked = durable.save(store, tracked, after, settings=big, verdict=False)
        last = store.changes()
        log.extend(last)
        store.commit()
    assert tracked.source.state.filled == 1000

    def rows_bytes(records: _Changelog) -> int:
        return sum(len(v or b"") for k, v in records if k.startswith(("rows/", "ref/")))

    live = {k: v for k, v in log}  # what compaction keeps
    # every row was written once: nothing of the window was written again per batch
    assert rows_bytes(log) == rows_bytes(list(live.items()))
    # a batch writes its 50 rows and the counters: a small share of the half window
    assert sum(len(v or b"") for _, v in last) * 10 < rows_bytes(list(live.items())) / 2
    assert len(live["meta"] or b"") < 4096


def test_other_settings_start_afresh_and_clear_what_the_old_ones_left(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "s.sqlite", inlet="in", partition=0)
    tracked, log = durable.load(store, _fresh(), _SETTINGS), []
    tracked, _ = _step(store, tracked, _records(50, start=0), log)
    newer = DriftSettings(name="d", version=2, numeric=("x",), window=10, step=10)
    fresh = sources.Source.start("inputs", newer, layout=newer.layout)
    again = durable.load(store, fresh, newer)
    assert again.meta is None and again.source is fresh
    after, _ = fresh.absorb(sources.input_rows(_records(5, start=50), fresh)[0], newer)
    durable.save(store, again, after, settings=newer, verdict=False)
    store.commit()
    # what the old settings left is gone: one reference chunk, of the 5 new rows
    assert [k for k in store.keys(prefix="") if not k.startswith("rows/")] == [
        "meta",
        "ref/000000000000",
    ]
    assert len(store.get("ref/000000000000")["offset"]) == 5


@pytest.mark.parametrize("partitions", [2])
def test_each_partition_has_its_own_windows(partitions: int) -> None:
    source = sources.Partitioned(_fresh())
    rows, _ = sources.input_rows(
        [r for i in range(35) for r in _records(1, start=i, partition=i % partitions)],
        source.fresh,
    )
    after, done = source.absorb(rows, _SETTINGS)
    assert done == []  # 30 rows each make a reference first
    assert sorted(after.parts) == [0, 1]
    assert after.part(0).collect == 30 - 18 and after.part(1).collect == 30 - 17


def test_a_detector_restarted_elsewhere_finishes_its_window_and_does_not_alert_again() -> None:
    """The testkit's restart: a new detector restored from the old one's changelog."""
    h = d.harness(d.InputDrift, window=100, reference_size=100)
    d.settle(h)
    shifted = d.points(350, seed=3, shift=3.0, shift_at=100)
    h.feed("in", shifted[:250])  # the reference, window 0 (drifted: an alert), half of window 1
    h.run()
    assert [r["window"]["index"] for r in d.reports(h)] == [0]
    assert len(h.values("alerts")) == 1
    again = h.restarted()
    h.teardown()
    d.settle(again)
    again.feed("in", shifted[250:])
    again.run()
    (report,) = d.reports(again)
    assert report["window"]["index"] == 1 and report["drifted"]
    # the rows from before the restart are in it: 50 fed there (offsets 200-249), 50 here
    # (offsets 0-49 of the new harness's topic, so one span of the same partition)
    assert report["window"]["records"] == 100
    assert [(o["first"], o["last"]) for o in report["window"]["offsets"]] == [(0, 249)]
    assert again.values("alerts") == []  # drifted before, drifted still: nothing to alert
    again.teardown()
