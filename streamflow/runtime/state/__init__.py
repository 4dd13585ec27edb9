"""Durable streamlet state (see :mod:`streamflow.api.state`): the runtime's side.

:mod:`.store` keeps one partition's state in SQLite, :mod:`.manager` opens,
restores, writes and closes a replica's stores around the processing loop,
:mod:`.changelog` makes and reads the compacted changelog topics, and
:mod:`.codec` turns values into bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from streamflow.blueprint.plan import StreamletPlan
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.ports import Bindings
from streamflow.runtime.state.changelog import KafkaChangelog, ensure_changelogs
from streamflow.runtime.state.manager import StateManager

__all__ = ["STATE_DIR_ENV", "StateManager", "connect", "state_directory"]

#: Where replicas keep their local stores; default ``~/.local/state/streamflow``.
STATE_DIR_ENV = "STREAMFLOW_STATE_DIR"
_METADATA_TIMEOUT_S = 30.0


def state_directory(app: str, streamlet: str, *, base: str | None = None) -> Path:
    """The local stores of ``app``'s ``streamlet``: one SQLite file per inlet partition."""
    root = base or os.environ.get(STATE_DIR_ENV) or Path.home() / ".local" / "state" / "streamflow"
    return Path(root) / app / streamlet


def connect(
    plan: StreamletPlan,
    bindings: Bindings,
    clients: KafkaClients,
    *,
    client_id: str,
    base: str | None = None,
) -> StateManager:
    """The state of one replica: its changelog topics made if missing, nothing restored yet
    (that happens as partitions are assigned)."""
    admin = clients.admin()
    metadata = admin.list_topics(timeout=_METADATA_TIMEOUT_S)
    changelogs: dict[str, tuple[str, str]] = {}
    sizes: dict[str, tuple[int, int]] = {}
    app = plan.app
    replication = min((t.replication for t in app.topics.values()), default=1)
    for topic, (inlet, _) in bindings.inlets_by_topic.items():
        changelog = plan.changelogs[inlet]
        changelogs[topic] = (inlet, changelog)
        spec = app.topics.get(topic)
        found = metadata.topics.get(topic)
        partitions = len(found.partitions) if found is not None and found.partitions else 1
        sizes[changelog] = (partitions, spec.replication if spec is not None else replication)
    ensure_changelogs(admin, sizes)
    return StateManager(
        changelogs=changelogs,
        directory=state_directory(app.name, plan.name, base=base),
        reader=KafkaChangelog(clients, client_id=client_id),
    )
