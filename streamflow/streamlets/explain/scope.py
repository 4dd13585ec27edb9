"""What an explanation covers: which inputs, which output, which method. Decided once per model.

A model may take an image, a feature vector and a string at once. Attribution
methods move *numbers* (integrated gradients along a path from a baseline,
SHAP by filling features from a background), so they apply to float inputs
only. A text or integer input is not an error: the method says plainly that it
does not apply to it, and holds it at each record's own value while the float
inputs are explained. A model with no float input at all is explained by
nothing, and says so, rather than failing its load.

The float inputs, flattened row-major and laid side by side in mapping order,
form one *feature row* per record (:class:`Layout`). That row is what the
background holds, what a mean or median baseline is computed over, and what
SHAP's explainers and a remote ``:explain`` see; it needs fixed per-record
shapes. Integrated gradients do not need it: they work on the tensors as they
are, with zeros as the default baseline for anything that is not a plain
feature vector (a black image is the customary baseline for an image).

Which method: the configured one where it applies. Gradients need a
differentiable embedded model; without one the streamlet falls back to
``shap-kernel`` where that applies (one feature row, nothing held fixed), and
otherwise explains nothing and says why. Every decision carries its reason in
``Plan.note``, which reaches the log and the status outlet once per model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from streamflow.models import tensors
from streamflow.models.predictor import Predictor

__all__ = [
    "GRADIENT",
    "METHODS",
    "ExplainError",
    "Layout",
    "Plan",
    "explained_output",
    "plan",
]

METHODS = ("integrated-gradients", "shap-gradient", "shap-kernel", "remote")
GRADIENT = ("integrated-gradients", "shap-gradient")
_FLOATS = ("float32", "float64")


class ExplainError(Exception):
    """A model the configured method cannot explain (with ``fallback: none``), or a bad output."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """A model's float inputs side by side, and why the others cannot be explained."""

    specs: dict[str, tensors.TensorInput]  # the float inputs, in mapping order
    skipped: dict[str, str]  # every other input -> how to name it: "input 'review' (string: text)"

    @classmethod
    def of(cls, inputs: Mapping[str, tensors.TensorInput]) -> Layout:
        specs: dict[str, tensors.TensorInput] = {}
        skipped: dict[str, str] = {}
        for name, spec in inputs.items():
            if spec.dtype in _FLOATS:
                specs[name] = spec
            else:
                kind = "text" if spec.dtype in ("string", "bytes") else "not a float"
                skipped[name] = f"input {name or spec.field!r} ({spec.dtype}: {kind})"
        return cls(specs, skipped)

    @property
    def explained(self) -> tuple[str, ...]:
        return tuple(self.specs)

    @property
    def fixed_shape(self) -> bool:
        """Whether every float input has one per-record shape (no ragged sequences)."""
        return not any(spec.ragged for spec in self.specs.values())

    @property
    def tabular(self) -> bool:
        """Whether the float inputs are feature vectors (rank 0 or 1), not images or grids."""
        return all(len(spec.shape) <= 1 for spec in self.specs.values())

    @property
    def features(self) -> int:
        """The feature row's length (0 when a shape is ragged: there is no fixed row)."""
        if not self.fixed_shape:
            return 0
        return sum(int(np.prod(spec.shape, dtype=np.int64)) for spec in self.specs.values())

    def flatten(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Records' float inputs as feature rows, (n, features)."""
        parts = [np.asarray(inputs[name], dtype=np.float32) for name in self.specs]
        rows = len(parts[0]) if parts else 0
        return np.concatenate([p.reshape(rows, -1) for p in parts], axis=1)

    def split(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Feature rows (n, features) back into tensors (n, *shape); a single row (features,)
        into per-record tensors."""
        single = rows.ndim == 1
        matrix = rows.reshape(1, -1) if single else rows
        out, start = {}, 0
        for name, spec in self.specs.items():
            size = int(np.prod(spec.shape, dtype=np.int64))
            part = matrix[:, start : start + size].reshape(len(matrix), *spec.shape)
            out[name] = part[0] if single else part
            start += size
        return out

    def feature_names(self, name: str, shape: tuple[int, ...]) -> list[str]:
        """Names of an input's elements: its fields when stacked, else ``image[3,4,0]``."""
        spec = self.specs[name]
        if spec.stacked:
            return list(spec.fields)
        from streamflow.streamlets.explain.gradients import element_names

        return element_names(name or spec.field, shape)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one model is explained, and the reason for anything other than what was asked."""

    method: str  # one of METHODS, or "none": nothing of this model can be explained
    note: str = ""
    output: str = ""  # the model output explained ("": its only one)
    explained: tuple[str, ...] = ()  # the float inputs attributed
    fixed: tuple[str, ...] = ()  # inputs the method does not apply to: held at their values
    baseline: str = "zeros"  # zeros | mean | median | values (integrated gradients)
    layout: Layout = dataclasses.field(default_factory=lambda: Layout({}, {}))

    @property
    def symbol(self) -> str:
        """The Explanation schema's ExplanationMethod symbol."""
        return self.method.upper().replace("-", "_")

    @property
    def needs_background(self) -> bool:
        return self.method in ("shap-gradient", "shap-kernel") or self.baseline in (
            "mean",
            "median",
        )


def explained_output(mapping: tensors.BoundMapping, explicit: str) -> str:
    """The model output to explain: ``explicit``, the only one, or the first one mapped."""
    declared = mapping.signature.outputs if mapping.signature is not None else None
    if explicit:
        if declared is not None and explicit not in declared:
            raise ExplainError(
                f"explained_output {explicit!r} is not an output of the model "
                f"(it has: {', '.join(declared)})"
            )
        return explicit
    if declared is not None and len(declared) == 1:
        return next(iter(declared))
    if mapping.outputs:
        return mapping.outputs[0][0]
    if declared:
        raise ExplainError(
            f"the model has outputs {', '.join(declared)}; set explained_output to the one "
            "to explain"
        )
    return ""


def plan(
    method: str,
    *,
    tag: str,
    fallback: str,
    layout: Layout,
    predictor: Predictor,
    output: str,
    baseline: str,
    explicit_baseline: bool,
    probe: Callable[[], str],
) -> Plan:
    """The plan for one model; ``probe()`` says why it has no gradients ("" if it has)."""
    chosen = Plan(
        method,
        output=output,
        explained=layout.explained,
        fixed=tuple(layout.skipped),
        layout=layout,
    )
    if not layout.explained:
        what = ", ".join(layout.skipped.values()) or "nothing"
        note = (
            f"{method} does not apply to this model: it takes {what}, and attributions need "
            "a float tensor; nothing is explained"
        )
        return dataclasses.replace(chosen, method="none", note=note)
    unusable = _requirements(method, layout)
    if unusable:
        note = (
            f"{method} does not apply to this model: {unusable}; nothing is explained "
            "(integrated-gradients explains float tensors of any shape)"
        )
        return dataclasses.replace(chosen, method="none", note=note)
    if method in GRADIENT:
        reason = _no_gradients(method, predictor, probe)
        if reason:
            if fallback == "none":
                raise ExplainError(f"{method} cannot explain {tag}: {reason}")
            unusable = _requirements("shap-kernel", layout)
            if unusable:
                note = (
                    f"{method} cannot explain it ({reason}), and shap-kernel does not apply "
                    f"({unusable}); nothing is explained"
                )
                return dataclasses.replace(chosen, method="none", note=note)
            note = f"{method} cannot explain it ({reason}); using shap-kernel"
            return dataclasses.replace(chosen, method="shap-kernel", note=note)
    notes = [
        f"{method} does not apply to {what}, as attributions need a float tensor: it is held "
        "at each record's value and gets no attribution"
        for what in layout.skipped.values()
    ]
    kind = "zeros"
    if method == "integrated-gradients":
        kind, why = _baseline(baseline, explicit=explicit_baseline, layout=layout)
        notes += [why] if why else []
    return dataclasses.replace(chosen, note="; ".join(notes), baseline=kind)


def _requirements(method: str, layout: Layout) -> str:
    """Why ``method`` cannot see this model's inputs ("" if it can)."""
    if method == "integrated-gradients":
        return ""
    if layout.skipped:
        what = next(iter(layout.skipped.values()))
        return f"it sees one row of float features, and the model also takes {what}"
    if not layout.fixed_shape:
        return "it sees one row of features, and a ragged input has no fixed row"
    if method == "shap-kernel":
        return ""
    if len(layout.specs) != 1:
        return f"it explains one input, and the model has {len(layout.specs)}"
    if method == "remote" and not layout.tabular:
        spec = next(iter(layout.specs.values()))
        return (
            f"a :explain server gets rows of features, and the input has shape {list(spec.shape)}"
        )
    return ""


def _no_gradients(method: str, predictor: Predictor, probe: Callable[[], str]) -> str:
    if predictor.remote:
        return "a remote model exposes no gradients"
    model = predictor.gradients
    if model is None:
        return f"a {predictor.description} model exposes no gradients"
    if method == "shap-gradient":
        keras_model = model.keras_model
        if keras_model is None:
            return "SHAP's GradientExplainer needs a Keras model"
        if len(keras_model.inputs) != 1 or len(keras_model.outputs) != 1:
            return "SHAP's GradientExplainer needs a Keras model with one input and one output"
    return probe()


def _baseline(kind: str, *, explicit: bool, layout: Layout) -> tuple[str, str]:
    """Integrated gradients' baseline, and a note when it is not the one asked for."""
    if explicit:
        return "values", ""
    if kind == "auto":
        return ("mean" if layout.tabular and layout.fixed_shape else "zeros"), ""
    if kind in ("mean", "median") and not layout.fixed_shape:
        return "zeros", f"baseline {kind} needs inputs of fixed shape; using zeros"
    return kind, ""
