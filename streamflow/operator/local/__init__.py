"""The local target: each replica is an OS process on this machine."""

from streamflow.operator.local.processes import ProcessGroup, ReplicaProcess, replica_command

__all__ = ["ProcessGroup", "ReplicaProcess", "replica_command"]
