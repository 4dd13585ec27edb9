"""``bench.hotpath`` runs both loops over the same batches and leaves the collector as it was."""

from __future__ import annotations

import gc

from bench import hotpath


def test_both_loops_run_every_round_and_the_gc_policy_is_restored() -> None:
    threshold = gc.get_threshold()
    seen = hotpath.compare(size=100, batch=50, rounds=2, records=200)
    assert {name: len(rounds) for name, rounds in seen.items()} == {"streamflow": 2, "hand": 2}
    assert all(us > 0 for rounds in seen.values() for us in rounds)
    assert gc.get_threshold() == threshold
    assert gc.get_freeze_count() == 0


def test_every_piece_is_timed() -> None:
    pieces = hotpath.pieces(size=100, batch=50, rounds=2)
    assert len(pieces) == 7
    assert all(0 < ns < 1e6 for ns in pieces.values())
