"""The local target: each replica is an OS process on this machine.

``processes`` starts, watches and restarts replica processes; ``supervisor``
reconciles applications onto them with the planner, with ``autoscaler``
measuring lag and keeping the counts of autoscaled streamlets; ``daemon`` runs one
supervisor per ``$STREAMFLOW_HOME`` behind ``streamflow deploy``, and
``control`` finds or starts it; ``target`` is the :class:`Target` the CLI
speaks to; ``store``, ``logfiles``, ``locks`` and ``probe`` are the files,
logs, locks and health endpoints they share, and ``pids`` the one way they
tell whether a recorded process is alive and stop it.

The names below are imported when first asked for: a command that needs only
``store`` (``streamflow score`` against a running application, say) does not
pay for the HTTP client the probes use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamflow.operator.local.processes import ProcessGroup, ReplicaProcess, replica_command
    from streamflow.operator.local.supervisor import LocalSupervisor

__all__ = ["LocalSupervisor", "ProcessGroup", "ReplicaProcess", "replica_command"]

_HOME = {
    "ProcessGroup": "processes",
    "ReplicaProcess": "processes",
    "replica_command": "processes",
    "LocalSupervisor": "supervisor",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
