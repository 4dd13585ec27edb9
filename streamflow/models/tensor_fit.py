"""Fitting a declared tensor mapping to one model's signature, and saying what does not fit.

:meth:`.tensors.TensorMapping.bind` asks this module, side by side, which model
tensor each entry of the mapping means. Two things make that more than a lookup:

- **The shorthand names no tensor.** ``input_fields`` means "the model's only
  input"; ``output_field`` and ``class_field`` mean its only output, or, for a
  classifier with several, a probabilities output and a label output found by
  name (:data:`PROBABILITY_NAMES`, :data:`LABEL_NAMES`: Keras-style names and
  what skl2onnx calls them with and without ZipMap). The choice is checked
  against the signature (a float row per record, one label per record), so a
  model that merely uses the names is not misread.
- **A mismatch must say how to fix it.** Every problem is collected with its
  fix, each sentence once (the shorthand's two outputs often fail for one
  reason), and the error names the model's inputs and outputs with their types,
  so the user can write the mapping from the message alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from streamflow.models.tensor_specs import (
    ONLY,
    MappingError,
    ModelSignature,
    TensorInput,
    TensorOutput,
    TensorSpec,
)

__all__ = [
    "LABEL_NAMES",
    "PROBABILITY_NAMES",
    "Problems",
    "bind_inputs",
    "bind_outputs",
]

#: Model outputs the shorthand takes for a classifier's per-class probabilities (any case).
PROBABILITY_NAMES = ("probabilities", "output_probability", "probability", "probs", "scores")
#: ... and for its predicted label.
LABEL_NAMES = ("label", "output_label", "labels", "class", "classes", "predicted")
_FLOATS = ("float32", "float64", "")
_LABELS = ("int32", "int64", "string", "bytes", "")


class Problems:
    """What does not fit, and the fixes, each sentence once, in the order found."""

    def __init__(self) -> None:
        self._problems: dict[str, None] = {}
        self._fixes: dict[str, None] = {}

    def add(self, problem: str, fix: str = "") -> None:
        self._problems.setdefault(problem)
        if fix:
            self._fixes.setdefault(fix)

    def __bool__(self) -> bool:
        return bool(self._problems)

    def error(self, signature: ModelSignature | None) -> MappingError:
        detail = f" (the model has {signature.describe()})" if signature else ""
        return MappingError("; ".join(self._problems) + detail, fix="; ".join(self._fixes))


def bind_inputs(
    declared: Mapping[str, TensorInput], model: ModelSignature | None, problems: Problems
) -> dict[str, TensorInput]:
    """Each declared input by the model's name for it (unchecked without a signature)."""
    if model is None:
        return {spec.name: spec for spec in declared.values()}
    names = ", ".join(model.inputs)
    out: dict[str, TensorInput] = {}
    for spec in declared.values():
        name = spec.name
        if name == ONLY:
            if len(model.inputs) != 1:
                example = ", ".join(f"{n}: {{field: FIELD, dtype: D}}" for n in model.inputs)
                problems.add(
                    f"input_fields feeds a model's only input, and the model has "
                    f"{len(model.inputs)} inputs ({names})",
                    f"replace input_fields with inputs: {{{example}}}",
                )
                continue
            name = next(iter(model.inputs))
        elif name not in model.inputs:
            problems.add(
                f"the model has no input {name!r}",
                f"under inputs:, rename {name!r} to one of the model's inputs ({names})",
            )
            continue
        _check_input(spec, model.inputs[name], problems)
        out[name] = spec
    missing = [n for n in model.inputs if n not in out]
    if missing and len(out) == len(declared):  # not when a declared one is misnamed
        problems.add(
            f"the model also needs input(s) {', '.join(missing)}, which the mapping does not feed",
            f"add {', '.join(missing)} under inputs:",
        )
    return out


def bind_outputs(
    declared: Mapping[str, TensorOutput], model: ModelSignature | None, problems: Problems
) -> list[tuple[str, TensorOutput]]:
    """(the model's output name, what it writes) for each declared output."""
    if model is None:
        return [(spec.name, spec) for spec in declared.values()]
    names = ", ".join(model.outputs)
    out: list[tuple[str, TensorOutput]] = []
    for spec in declared.values():
        if spec.name == ONLY:
            chosen = _shorthand_output(spec, model, problems)
            if chosen is not None:
                out.append(chosen)
            continue
        found = model.outputs.get(spec.name)
        if found is None:
            problems.add(
                f"the model has no output {spec.name!r}",
                f"under outputs:, rename {spec.name!r} to one of the model's outputs ({names})",
            )
        elif _readable(found, problems):
            out.append((spec.name, spec))
    return out


def _shorthand_output(
    spec: TensorOutput, model: ModelSignature, problems: Problems
) -> tuple[str, TensorOutput] | None:
    """The model output that ``output_field`` or ``class_field`` means, and how it is read."""
    if len(model.outputs) == 1:
        only = next(iter(model.outputs.values()))
        return (only.name, spec) if _readable(only, problems) else None
    scores = _named(model, PROBABILITY_NAMES)
    labels = _named(model, LABEL_NAMES)
    if len(scores) != 1 or len(labels) > 1:
        example = ", ".join(f"{n}: {{field: FIELD}}" for n in model.outputs)
        problems.add(
            f"output_field and class_field read a model's only output, or a classifier's "
            f"probabilities ({', '.join(PROBABILITY_NAMES)}) and label "
            f"({', '.join(LABEL_NAMES)}); the model has {len(model.outputs)} outputs "
            f"({', '.join(model.outputs)}), and {_which(scores, labels)}",
            f"replace output_field and class_field with outputs: "
            f"{{{example}}}, naming the field each output writes",
        )
        return None
    probabilities = scores[0]
    if not _fits_scores(probabilities, problems):
        return None
    if spec.role == "class" and labels:
        label = labels[0]
        if not _fits_label(label, problems):
            return None
        return label.name, dataclasses.replace(spec, transform="raw")
    return probabilities.name, spec


def _named(model: ModelSignature, wanted: tuple[str, ...]) -> list[TensorSpec]:
    return [spec for name, spec in model.outputs.items() if name.lower() in wanted]


def _which(scores: list[TensorSpec], labels: list[TensorSpec]) -> str:
    if not scores:
        return "none of them is a probabilities output by name"
    if len(scores) > 1:
        return f"{', '.join(s.name for s in scores)} are all probabilities outputs by name"
    return f"{', '.join(s.name for s in labels)} are all label outputs by name"


def _fits_scores(spec: TensorSpec, problems: Problems) -> bool:
    """A probabilities output: a float row per record (or a ZipMap, read as one)."""
    if not _readable(spec, problems):
        return False
    rank_ok = spec.shape is None or len(spec.shape) == 2
    if spec.dtype in _FLOATS and rank_ok:
        return True
    problems.add(
        f"output {spec.name!r} is taken for the probabilities by its name, but it is "
        f"{spec.describe()}, not a row of floats per record",
        "name each output under outputs: instead of using output_field/class_field",
    )
    return False


def _fits_label(spec: TensorSpec, problems: Problems) -> bool:
    """A label output: one integer or string per record."""
    if not _readable(spec, problems):
        return False
    per_record = spec.shape is None or len(spec.shape) == 1 or tuple(spec.shape[1:]) == (1,)
    if spec.dtype in _LABELS and per_record:
        return True
    problems.add(
        f"output {spec.name!r} is taken for the label by its name, but it is "
        f"{spec.describe()}, not one integer or string per record",
        "name each output under outputs: instead of using output_field/class_field",
    )
    return False


def _readable(spec: TensorSpec, problems: Problems) -> bool:
    if spec.readable:
        return True
    problems.add(
        f"output {spec.name!r} is a {spec.kind}, which is not a tensor and cannot be served",
        "export the model so that its outputs are tensors (skl2onnx: "
        "options={'zipmap': False} for a classifier's probabilities)",
    )
    return False


def _check_input(mapped: TensorInput, declared: TensorSpec, problems: Problems) -> None:
    text = ("string", "bytes")  # servers and TensorFlow do not tell the two apart
    if declared.dtype in text and mapped.dtype in text:
        pass
    elif declared.dtype and declared.dtype != mapped.dtype:
        problems.add(
            f"input {declared.name!r} is {declared.dtype} in the model, "
            f"{mapped.dtype} in the mapping",
            f"set dtype: {declared.dtype} on input {declared.name!r} under inputs:",
        )
    if declared.shape is None:
        return
    model_dims = list(declared.shape[1:])
    shape_problem = (
        f"input {declared.name!r} has per-record shape {model_dims} in the model, "
        f"{list(mapped.shape)} in the mapping"
    )
    shape_fix = f"set shape: {model_dims} on input {declared.name!r} under inputs:"
    if mapped.stacked and len(model_dims) == 1 and model_dims[0] != -1:
        where = "input_fields" if mapped.name == ONLY else f"fields of input {mapped.name!r}"
        shape_fix = f"list {model_dims[0]} fields in {where} (it lists {len(mapped.fields)})"
    if len(model_dims) != len(mapped.shape):
        problems.add(shape_problem, shape_fix)
        return
    if mapped.ragged and model_dims[0] != -1 and mapped.max_len != model_dims[0]:
        problems.add(
            f"input {declared.name!r} takes sequences of exactly {model_dims[0]}",
            f"set max_len: {model_dims[0]} on input {declared.name!r} under inputs: "
            "(it pads and cuts to that length)",
        )
        return
    for ours, theirs in zip(mapped.shape, model_dims, strict=True):
        if ours != -1 and theirs != -1 and ours != theirs:
            problems.add(shape_problem, shape_fix)
            return
