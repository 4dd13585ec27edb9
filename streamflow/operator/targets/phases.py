"""An application's phase: the closed set every target reports.

The four phases are one closed set shared by both backends, the CLI and the
StreamflowApplication's CRD (whose ``status.phase`` enum is generated from
:class:`Phase`), so they are an enum rather than strings compared in many
places. It is a :class:`~enum.StrEnum`: a member *is* its string, so JSON,
the CRD status and ``-o yaml`` (which goes through JSON) see ``"Running"``
exactly as before.
"""

from __future__ import annotations

import enum

__all__ = ["Phase"]


class Phase(enum.StrEnum):
    """Where an application stands; the order is the CRD's ``status.phase`` enum."""

    PENDING = "Pending"  # starting, or a change not applied yet
    RUNNING = "Running"  # every replica wanted runs and is ready
    DEGRADED = "Degraded"  # replicas down or restarting
    FAILED = "Failed"  # the spec could not be applied; the message says why

    @classmethod
    def recorded(cls, value: object) -> Phase:
        """The phase an operator wrote; one this version does not know reads as Pending."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.PENDING
