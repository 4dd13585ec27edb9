"""Rollouts for a running application: a candidate beside the stable model, by records.

The use case behind ``streamflow model rollout``, on a serving streamlet's control
topic (:class:`~streamflow.operator.model_versions.ModelChannel`):

* :meth:`Rollouts.start` writes a candidate: the next version's descriptor with a
  ``rollout`` (shadow, canary or AB), keyed ``<model>#candidate``;
* :meth:`Rollouts.change` writes the same candidate again with another mode or share
  (the replicas change the split, with no load);
* :meth:`Rollouts.promote` writes the candidate as the stable descriptor (keyed by the
  model's name; the replicas adopt the loaded candidate), then the candidate's end;
* :meth:`Rollouts.abort` writes the candidate's end (the replicas unload it).

Each record is whole: compaction keeps the latest per key, a stable one and a candidate,
and a replica that starts later replays the same state (see
:mod:`streamflow.models.rollout`). Where the rollout stands is read back from the topic
the same way (:func:`standing`), so these commands need no state of their own.
"""

from __future__ import annotations

import dataclasses

from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.rollout import Rollout, RolloutMode
from streamflow.models.rollout_standing import (
    Standing,
    changed,
    control_key,
    ending,
    promotion,
    standing,
)
from streamflow.operator.model_versions import (
    ModelChannel,
    ModelPushError,
    Pushed,
    PushRequest,
    end_offsets,
    produce_descriptors,
)

__all__ = ["Rollouts", "Standing", "standing"]


class Rollouts:
    """The rollout commands of one serving streamlet (see the module docstring)."""

    def __init__(self, channel: ModelChannel) -> None:
        self.channel = channel

    def standing(self, model: str | None = None) -> Standing:
        return standing(self.channel.history(), model)

    def start(self, request: PushRequest, rollout: Rollout) -> Pushed:
        """A candidate: the next version, beside the stable one, meeting what ``rollout``
        says. Refused when no stable version runs, or a rollout runs already."""
        _check(rollout)
        history = self.channel.history()
        now = standing(history, request.name)
        if now.stable is None:
            raise ModelPushError(
                "no stable version to roll out against",
                hint="push one first: streamflow model push",
            )
        if now.candidate is not None:
            raise ModelPushError(
                f"{now.model}:{now.candidate.version} is rolling out already",
                hint="promote or abort it first (streamflow model rollout promote|abort)",
            )
        newest = max((d["version"] for d in history if d["name"] == now.model), default=0)
        version = request.version if request.version is not None else newest + 1
        if version <= now.stable.version:
            raise ModelPushError(
                f"version {version} is not newer than the stable version {now.stable.version}"
            )
        descriptor = request.descriptor(now.model, version)
        return self._write([dataclasses.replace(descriptor, rollout=rollout)])

    def change(self, rollout: Rollout, model: str | None = None) -> Pushed:
        """The running candidate, to meet what ``rollout`` says now."""
        _check(rollout)
        candidate = self._candidate(model)
        return self._write([changed(candidate, rollout)])

    def promote(self, model: str | None = None) -> Pushed:
        """The candidate becomes the stable version on every replica (no second load)."""
        candidate = self._candidate(model)
        records = promotion(candidate)
        return self._write(records, awaited=records[0])

    def abort(self, model: str | None = None) -> Pushed:
        """The candidate leaves every replica; the stable version meets every record."""
        return self._write([ending(self._candidate(model))])

    def _candidate(self, model: str | None) -> ModelDescriptor:
        now = self.standing(model)
        if now.candidate is None:
            raise ModelPushError(
                f"no rollout of {now.model or 'a model'} runs",
                hint="start one: streamflow model rollout start",
            )
        return now.candidate

    def _write(
        self, descriptors: list[ModelDescriptor], awaited: ModelDescriptor | None = None
    ) -> Pushed:
        channel = self.channel
        start = end_offsets(channel.clients, channel.status.name) if channel.status else {}
        records = [
            (control_key(descriptor), channel.descriptors.encode(descriptor.to_record()))
            for descriptor in descriptors
        ]
        produce_descriptors(channel.clients, channel.control.name, records)
        shown = awaited or descriptors[0]
        return Pushed(
            model=shown.name,
            version=shown.version,
            kind=str(shown.kind),
            size=len(shown.data or b""),
            topic=channel.control.name,
            status_start=start,
            role="stable" if shown.rollout is None else "candidate",
        )


def _check(rollout: Rollout) -> None:
    if rollout.mode is RolloutMode.END:
        raise ModelPushError("END is written by promote and abort, not started")
    refusal = rollout.refusal()
    if refusal:
        raise ModelPushError(refusal)
