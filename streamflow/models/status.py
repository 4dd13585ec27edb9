"""A ``streamflow.ml.ModelStatus`` record: where one replica stands with one version.

Serving reports each model version's steps on its ``status`` outlet, and the drift
detector each of its settings' versions, in the same record (``model push`` and
``streamflow model status`` read them alike). Each report is logged too, as a
warning when it is trouble.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from streamflow.models.kinds import TROUBLE_STATES, ModelState

__all__ = ["status_record"]


def status_record(
    *,
    model: str,
    version: int,
    state: ModelState,
    message: str,
    replica: str,
    log: logging.Logger,
    what: str = "model",
    role: str = "",
) -> dict[str, Any]:
    """The record, once logged to ``log`` as ``<what> <model>:<version> <state>: <message>``."""
    level = logging.WARNING if state in TROUBLE_STATES else logging.INFO
    said = f"{role} {what}" if role else what
    log.log(level, "%s %s:%s %s: %s", said, model, version, state, message)
    return {
        "model": model,
        "version": version,
        "state": state,
        "message": message,
        "replica": replica,
        "role": role,
        "time": dt.datetime.now(dt.UTC),
    }
