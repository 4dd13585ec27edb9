"""Where a model's rollout stands, folded from its control topic, and the records that move it.

The serving replicas, ``streamflow model rollout`` and the rollout controller all read the
same compacted control topic, so they all reach the same answer the same way: the stable
version is the newest stable descriptor, and the candidate the latest rollout newer than
it that no END followed. :meth:`Standing.after` takes one descriptor at a time (what a
streamlet reading a control inlet sees); :func:`standing` folds a whole history.

The records that move a rollout on are built here once: :func:`changed` (the candidate
again, meeting another share), :func:`promotion` (the candidate as the stable version,
then its END) and :func:`ending` (its END alone, a rollback).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from streamflow.models.descriptor import ModelDescriptor
from streamflow.models.rollout import Rollout, RolloutMode, candidate_key

__all__ = ["Standing", "changed", "control_key", "ending", "promotion", "standing"]


@dataclasses.dataclass(frozen=True)
class Standing:
    """Where one model's rollout stands on the control topic."""

    model: str
    stable: ModelDescriptor | None = None
    candidate: ModelDescriptor | None = None  # None: no rollout runs

    def after(self, descriptor: ModelDescriptor) -> Standing:
        """The standing once ``descriptor`` (of this model) is read, as on a replica: a
        stable one at or past the candidate ends it, a candidate not newer than the stable
        version is ignored, and the same version with another artifact is refused."""
        stable, candidate = self.stable, self.candidate
        rollout = descriptor.rollout
        if rollout is None:
            if stable is None or descriptor.version > stable.version:  # the first of a version
                stable = descriptor
        elif rollout.mode is RolloutMode.END:
            if candidate is not None and candidate.version == descriptor.version:
                candidate = None
        elif rollout.refusal() is None and (
            candidate is None
            or descriptor.version > candidate.version
            or (
                descriptor.version == candidate.version
                and descriptor.artifact == candidate.artifact
            )
        ):
            candidate = descriptor
        if candidate is not None and stable is not None and candidate.version <= stable.version:
            candidate = None
        return Standing(self.model, stable, candidate)


def standing(history: Iterable[Mapping[str, Any]], model: str | None = None) -> Standing:
    """The state the replicas converge on, from the descriptors in the topic's order
    (``model``: the one to follow; by default the name of the last record)."""
    records = list(history)
    name = model or (records[-1]["name"] if records else "")
    now = Standing(name)
    for record in records:
        if record["name"] == name:
            now = now.after(ModelDescriptor.from_record(record))
    return now


def control_key(descriptor: ModelDescriptor) -> str:
    """The control topic's key of a descriptor: the model's name, or its candidate's key."""
    return descriptor.name if descriptor.rollout is None else candidate_key(descriptor.name)


def changed(candidate: ModelDescriptor, rollout: Rollout) -> ModelDescriptor:
    """The running candidate again, meeting what ``rollout`` says (no load on a replica)."""
    return dataclasses.replace(candidate, rollout=rollout)


def promotion(candidate: ModelDescriptor) -> list[ModelDescriptor]:
    """The records that promote ``candidate``: it as the stable version (the replicas adopt
    what they loaded), then its END."""
    return [dataclasses.replace(candidate, rollout=None), ending(candidate)]


def ending(candidate: ModelDescriptor, why: str = "the rollout ended") -> ModelDescriptor:
    """The record that ends ``candidate``'s rollout: its identity, no artifact."""
    return ModelDescriptor(
        candidate.name,
        candidate.version,
        candidate.kind,
        description=why,
        rollout=Rollout(RolloutMode.END),
    )
