"""A drift detector's settings: the streamlet's parameters, overridden by DriftConfig records.

The parameters give a detector its settings at start; a ``DriftConfig`` on
the control inlet replaces some of them live (a new reference, other
thresholds). One frozen value holds the merged result, and every problem
with it is listed at once, phrased for whoever wrote the config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from streamflow.streamlets.datasets import FORMATS
from streamflow.streamlets.drift import stats

__all__ = ["TESTS", "DriftSettings"]

TESTS = ("ks", "chi2", "psi")


@dataclasses.dataclass(frozen=True)
class DriftSettings:
    name: str
    version: int = 0
    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    tests: tuple[str, ...] = TESTS
    window: int = 500
    step: int = 500
    alpha: float = 0.05
    correction: str = "bonferroni"
    psi_threshold: float = 0.25
    psi_bins: int = 10
    reference_location: str | None = None
    reference_sha256: str | None = None
    reference_format: str = "auto"
    reference_size: int = 1000
    detector_url: str | None = None
    detector_model: str = "drift"

    def merged(self, config: Mapping[str, Any]) -> DriftSettings:
        """These settings with a DriftConfig record's non-empty fields applied."""
        changes: dict[str, Any] = {"name": config["name"], "version": int(config["version"])}
        for field in ("numeric", "categorical", "tests"):
            if config.get(field):
                changes[field] = tuple(
                    str(v).lower() if field == "tests" else v for v in config[field]
                )
        for field in ("window", "alpha", "psi_threshold", "reference_size"):
            if config.get(field) is not None:
                changes[field] = config[field]
        if config.get("correction"):
            changes["correction"] = str(config["correction"]).lower()
        window = changes.get("window", self.window)
        step = config.get("step")
        changes["step"] = step if step else (window if "window" in changes else self.step)
        # a new location brings its own digest; no location means "the first records"
        changes["reference_location"] = config.get("reference_location")
        changes["reference_sha256"] = config.get("reference_sha256")
        parameters = dict(config.get("parameters") or {})
        if "reference_format" in parameters:
            changes["reference_format"] = parameters["reference_format"]
        if "psi_bins" in parameters:
            changes["psi_bins"] = int(parameters["psi_bins"])
        if "detector_url" in parameters:
            changes["detector_url"] = parameters["detector_url"] or None
        if "detector_model" in parameters:
            changes["detector_model"] = parameters["detector_model"]
        return dataclasses.replace(self, **changes)

    def problems(self, *, fields: Mapping[str, set[str]] | None = None) -> list[str]:
        """What is wrong with these settings; ``fields`` maps a source to its record's fields."""
        out = []
        if self.window < 2:
            out.append(f"window must be at least 2 records, not {self.window}")
        if not 1 <= self.step <= max(self.window, 1):
            out.append(f"step must be between 1 and the window ({self.window}), not {self.step}")
        if not 0.0 < self.alpha < 1.0:
            out.append(f"alpha must be between 0 and 1, not {self.alpha}")
        if self.correction not in stats.CORRECTIONS:
            out.append(
                f"unknown correction {self.correction!r}: use {', '.join(stats.CORRECTIONS)}"
            )
        unknown = [t for t in self.tests if t not in TESTS]
        if unknown:
            out.append(f"unknown tests {', '.join(unknown)}: use {', '.join(TESTS)}")
        if self.psi_threshold <= 0:
            out.append(f"psi_threshold must be positive, not {self.psi_threshold}")
        if self.psi_bins < 2:
            out.append(f"psi_bins must be at least 2, not {self.psi_bins}")
        if self.reference_size < 2:
            out.append(f"reference_size must be at least 2, not {self.reference_size}")
        if self.reference_format not in FORMATS:
            out.append(
                f"unknown reference format {self.reference_format!r}: use {', '.join(FORMATS)}"
            )
        both = set(self.numeric) & set(self.categorical)
        if both:
            out.append(f"{', '.join(sorted(both))} cannot be both numeric and categorical")
        inputs = (fields or {}).get("in")
        if inputs is not None:
            if not (self.numeric or self.categorical):
                out.append("name the input features to watch: numeric, categorical or both")
            missing = [f for f in (*self.numeric, *self.categorical) if f not in inputs]
            if missing:
                out.append(
                    f"the input records have no field {', '.join(repr(m) for m in missing)} "
                    f"(they have: {', '.join(sorted(inputs))})"
                )
        return out
