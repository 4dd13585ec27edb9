"""Rollouts judged by evidence (see :mod:`.evidence` and :mod:`.controller`).

:class:`RolloutEvidence` turns a serving streamlet's outputs, its shadow outputs and a
delayed labels topic into evidence per model version and window; the
:class:`RolloutController` sums it over each step of a rollout policy and advances,
holds, promotes or rolls back the candidate with control records, writing each decision
and why.
"""

from streamflow.streamlets.rollout.controller import RolloutController
from streamflow.streamlets.rollout.evidence import RolloutEvidence

__all__ = ["RolloutController", "RolloutEvidence"]
