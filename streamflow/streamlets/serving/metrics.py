"""What a serving streamlet tells Prometheus of the versions it serves, and of a rollout.

``streamflow_model_outputs_total{model, role}``: the outputs each version made (role
``serving``, or ``shadow`` for a shadowed candidate's); ``streamflow_candidate_share
{model}``: the percent of the keys a rollout's candidate meets (a shadow: 100; 0 once it
leaves); ``streamflow_candidate_failures_total{model}``: the records a candidate failed
on, which the stable model served instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streamflow.api.streamlet import Context
from streamflow.models.rollout import Rollout
from streamflow.streamlets.serving.active import ActiveModel

__all__ = ["RolloutMetrics"]

log = logging.getLogger("streamflow.streamlets.serving")


class RolloutMetrics:
    """Reports to the streamlet's context (asked for at each report: it is set in setup)."""

    def __init__(self, context: Callable[[], Context]) -> None:
        self._context = context
        self._shown: tuple[str, Rollout] | None = None  # the rollout the gauge shows
        self._failures = 0  # batches a candidate raised on

    def show(self, plan: tuple[Rollout, ActiveModel] | None) -> None:
        """The rollout that runs now (None: none); the gauge moves only when it changes."""
        shown = None if plan is None else (plan[1].tag, plan[0])
        if shown == self._shown:
            return
        if self._shown is not None:  # the last candidate no longer meets any record
            self._share(self._shown[0], 0.0)
        if shown is not None:
            tag, rollout = shown
            self._share(tag, rollout.share if rollout.splits else 100.0)
        self._shown = shown

    def served(self, model: ActiveModel, records: int, *, shadow: bool = False) -> None:
        """Count the outputs a version made."""
        if records:
            self._context().count(
                "model_outputs",
                count=records,
                description="outputs made, by the model version that made them and its role",
                labels={"model": model.tag, "role": "shadow" if shadow else "serving"},
            )

    def candidate_failed(self, candidate: ActiveModel, exc: Exception, rows: int) -> None:
        """The candidate raised on a batch: its rows went to the stable model (or, in a
        shadow, had no shadow). Counted, and logged once per hundred such batches."""
        self._failures += 1
        self._context().count(
            "candidate_failures",
            count=rows,
            description="records a rollout's candidate failed on, served by the stable model",
            labels={"model": candidate.tag},
        )
        if self._failures % 100 == 1:
            log.warning(
                "candidate %s failed a batch of %d (%s: %s); the stable model served it "
                "(%d such batches so far)",
                candidate.tag,
                rows,
                type(exc).__name__,
                exc,
                self._failures,
            )

    def _share(self, tag: str, share: float) -> None:
        self._context().set_gauge(
            "candidate_share",
            share,
            description="the percent of the keys a rollout's candidate meets (a shadow: 100)",
            labels={"model": tag},
        )
