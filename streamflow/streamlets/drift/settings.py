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

from streamflow.models import tensors
from streamflow.streamlets.datasets import FORMATS
from streamflow.streamlets.drift import inputs as mapped
from streamflow.streamlets.drift import stats

__all__ = ["TESTS", "DriftSettings"]

#: ks: numbers, tensor elements, text lengths; chi2: categories, vocabulary; psi: numbers and
#: categories; mmd: whole tensors; oov: the out-of-vocabulary rate of text.
TESTS = ("ks", "chi2", "psi", "mmd", "oov")


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
    inputs: tuple[tensors.TensorInput, ...] = ()  # mapped model inputs: tensors and text
    permutations: int = 500  # of the MMD test
    mmd_rows: int = 300  # at most, per side, in the MMD test
    vocabulary: int = 50  # the top tokens whose shares are compared
    oov_threshold: float = 0.1  # an out-of-vocabulary rate above this marks drift

    @classmethod
    def from_params(
        cls,
        values: Any,
        *,
        name: str,
        reference: str | None,
        inputs: tuple[tensors.TensorInput, ...],
    ) -> DriftSettings:
        """The settings a detector's parameters give it (``values``: the streamlet)."""
        v = values
        return cls(
            name=name,
            numeric=tuple(v.numeric),
            categorical=tuple(v.categorical),
            tests=tuple(v.tests),
            window=v.window,
            step=v.step or v.window,
            alpha=v.alpha,
            correction=v.correction,
            psi_threshold=v.psi_threshold,
            psi_bins=v.psi_bins,
            reference_location=reference,
            reference_sha256=v.reference_sha256 or None,
            reference_format=v.reference_format,
            reference_size=v.reference_size,
            detector_url=v.detector_url or None,
            detector_model=v.detector_model,
            inputs=inputs,
            permutations=v.permutations,
            mmd_rows=v.mmd_rows,
            vocabulary=v.vocabulary,
            oov_threshold=v.oov_threshold,
        )

    @property
    def layout(self) -> mapped.Layout:
        return mapped.layout(numeric=self.numeric, categorical=self.categorical, specs=self.inputs)

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
        out += self._input_problems()
        records = (fields or {}).get("in")
        if records is not None:
            if not (self.numeric or self.categorical or self.inputs):
                out.append(
                    "name the input features to watch: numeric, categorical or inputs "
                    "(tensors and text)"
                )
            missing = [f for f in (*self.numeric, *self.categorical) if f not in records]
            if missing:
                out.append(
                    f"the input records have no field {', '.join(repr(m) for m in missing)} "
                    f"(they have: {', '.join(sorted(records))})"
                )
            out += mapped.problems(self.inputs, records)
        return out

    def _input_problems(self) -> list[str]:
        if not self.inputs:
            return []
        out = []
        names = [s.name for s in self.inputs]
        clash = sorted(set(names) & {*self.numeric, *self.categorical})
        if clash:
            out.append(f"{', '.join(clash)} named both as a feature and as an input")
        if any(not n for n in names):
            out.append("name each input (model input name -> {field, dtype, shape})")
        if self.reference_location:
            out.append(
                "tensor and text inputs take their reference from the first reference_size "
                "records: leave the reference dataset out, or the inputs"
            )
        if self.detector_url:
            out.append("a hosted detector tests numeric features only; it cannot take inputs")
        if self.permutations < 20:
            out.append(f"permutations must be at least 20, not {self.permutations}")
        if self.mmd_rows < 10:
            out.append(f"mmd_rows must be at least 10, not {self.mmd_rows}")
        if self.vocabulary < 1:
            out.append(f"vocabulary must be at least 1, not {self.vocabulary}")
        return out
