"""The local target: each replica is an OS process on this machine.

``processes`` starts, watches and restarts replica processes; ``supervisor``
reconciles applications onto them with the planner, with ``autoscaler``
measuring lag and keeping the counts of autoscaled streamlets; ``daemon`` runs one
supervisor per ``$STREAMFLOW_HOME`` behind ``streamflow deploy``, and
``control`` finds or starts it; ``target`` is the :class:`Target` the CLI
speaks to; ``store``, ``logfiles``, ``locks`` and ``probe`` are the files,
logs, locks and health endpoints they share, and ``pids`` the one way they
tell whether a recorded process is alive and stop it.
"""

from streamflow.operator.local.processes import ProcessGroup, ReplicaProcess, replica_command
from streamflow.operator.local.supervisor import LocalSupervisor

__all__ = ["LocalSupervisor", "ProcessGroup", "ReplicaProcess", "replica_command"]
