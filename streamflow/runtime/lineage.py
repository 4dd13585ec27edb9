"""Lineage headers: which run and which row of a data set a record came from.

``streamflow score`` feeds a data set into an application's input topic with
two headers on every record: the run (``streamflow-run``) and the row
(``streamflow-row``). Every replica copies them from an input to each output
made from it, and a dead letter keeps all of its record's headers, so the
scorer can pick exactly its own results out of a topic that live traffic
shares, however many streamlets the records pass through.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ROW", "RUN", "carried"]

RUN = "streamflow-run"
ROW = "streamflow-row"
_CARRIED = frozenset((RUN, ROW))


def carried(headers: Any) -> list[tuple[str, Any]] | None:
    """The lineage headers among a consumed record's ``headers`` (a list of pairs, as
    ``Message.headers()`` gives them), or None if it has none.

    The two always travel together, so a record with fewer than two headers (one
    written by a replica has its schema's) has none; the hot path checks that first.
    """
    if not headers or len(headers) < 2:
        return None
    found = [(name, value) for name, value in headers if name in _CARRIED]
    return found or None
