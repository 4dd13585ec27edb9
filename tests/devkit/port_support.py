"""A port taken between the devkit finding it free and its server binding it."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from streamflow.devkit import _local


@contextmanager
def first_port_taken(
    monkeypatch: pytest.MonkeyPatch, address: str
) -> Iterator[tuple[int, list[tuple[int, ...]]]]:
    """(a port held open on ``address``, the ports the devkit picks): its first pick
    starts with the held port, as if someone bound it first; later picks are real."""
    holder = socket.socket()
    holder.bind((address, 0))
    holder.listen()
    taken = int(holder.getsockname()[1])
    real = _local.free_ports
    picked: list[tuple[int, ...]] = []

    def first_taken(count: int = 1, *, hosts: Sequence[str] = ()) -> tuple[int, ...]:
        ports = real(count, hosts=hosts)
        picked.append((taken, *ports[1:]) if not picked else ports)
        return picked[-1]

    monkeypatch.setattr(_local, "free_ports", first_taken)
    try:
        yield taken, picked
    finally:
        holder.close()
