"""The shared target layer: what every backend implements and speaks in.

A backend (``operator/local``, ``operator/kubernetes``) depends on this
package and never the reverse; the factory that picks a backend by name is
:mod:`streamflow.operator.backends`, above them both. Here:

* :mod:`.protocol`: the :class:`Target` protocol, :class:`TargetError`,
  :class:`Change`, :class:`LogLine`;
* :mod:`.status`: the status types and the local reading of a phase;
* :mod:`.phases`: the :class:`Phase` enum;
* :mod:`.changes`: checking a change before it is applied, and planning it;
* :mod:`.topics`: deleting an application's topics;
* :mod:`.writer_schemas`: dead letters a writer schema caused, read from replicas' metrics.

The names are re-exported, so a user writes ``targets.AppStatus``.
"""

from __future__ import annotations

from streamflow.operator.targets.changes import (
    data_inputs,
    effective_config,
    idle_replica_warnings,
    planned,
    reconfigured,
    scaled,
)
from streamflow.operator.targets.phases import Phase
from streamflow.operator.targets.protocol import Change, LogLine, Target, TargetError
from streamflow.operator.targets.status import (
    AppStatus,
    AutoscaleStatus,
    ReplicaStatus,
    StreamletStatus,
    phase_of,
)
from streamflow.operator.targets.topics import delete_managed
from streamflow.operator.targets.writer_schemas import WriterSchemaDeadLetters

__all__ = [
    "AppStatus",
    "AutoscaleStatus",
    "Change",
    "LogLine",
    "Phase",
    "ReplicaStatus",
    "StreamletStatus",
    "Target",
    "TargetError",
    "WriterSchemaDeadLetters",
    "data_inputs",
    "delete_managed",
    "effective_config",
    "idle_replica_warnings",
    "phase_of",
    "planned",
    "reconfigured",
    "scaled",
]
