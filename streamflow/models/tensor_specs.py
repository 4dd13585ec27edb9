"""The tensor mapping's declarations: what a config says, and what a model declares.

:mod:`.tensors` is the mapping itself; this module holds the values it is made
of, parsed and checked as early as possible (when the parameter is parsed, so
``streamflow verify`` reports a malformed entry at its line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "DTYPES",
    "NUMERIC",
    "ONLY",
    "TENSOR",
    "TRANSFORMS",
    "ZIPMAP",
    "MappingError",
    "ModelSignature",
    "RecordErrors",
    "TensorInput",
    "TensorOutput",
    "TensorSpec",
    "parse_inputs",
    "parse_outputs",
]

#: A model input or output named by its position: "the model's only one".
ONLY = ""

DTYPES: dict[str, Any] = {
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
    "string": object,
    "bytes": object,
}
NUMERIC = ("float32", "float64", "int32", "int64", "bool")
TRANSFORMS = ("raw", "argmax", "top_k", "threshold")


class MappingError(ValueError):
    """A mapping that cannot work: bad config, a field it cannot read, a model it does not fit.

    ``problem`` says what is wrong, ``fix`` (when there is one) what to change; the
    message is both, the fix last, so whoever shows it can put other words between.
    """

    def __init__(self, problem: str, *, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}. Fix: {fix}" if fix else problem)


class RecordErrors(MappingError):
    """Some records of a batch cannot be encoded: ``errors`` maps their index to why."""

    def __init__(self, errors: dict[int, str]) -> None:
        self.errors = errors
        first = next(iter(errors.items()))
        super().__init__(f"{len(errors)} record(s) do not fit the mapping; #{first[0]}: {first[1]}")


# -- the mapping's declaration ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorInput:
    """One model input: where each record's value comes from, its dtype and per-record shape.

    ``shape`` excludes the batch dimension; ``-1`` (first dimension only) is a ragged
    sequence padded with ``pad`` to ``max_len`` (or to the longest in the batch).
    Several ``fields`` are scalars stacked into a vector (the ``input_fields`` form).
    """

    name: str
    fields: tuple[str, ...]
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    pad: Any = 0
    max_len: int = 0
    stacked: bool = False  # scalar fields stacked into a vector (the input_fields form)

    @property
    def field(self) -> str:
        return self.fields[0]

    @property
    def ragged(self) -> bool:
        return bool(self.shape) and self.shape[0] == -1

    def describe(self) -> str:
        source = "+".join(self.fields)
        return f"{self.name or '(the only input)'} <- {source} {self.dtype}{list(self.shape)}"


@dataclasses.dataclass(frozen=True)
class TensorOutput:
    """One model output written to one record field, through a transform."""

    name: str
    field: str
    transform: str = "raw"
    k: int = 1
    labels: tuple[str, ...] = ()
    threshold: float = 0.5
    # the shorthand's outputs (output_field, class_field): "scores" or "class"; "" otherwise
    role: str = ""


def _shape(raw: Any, where: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in raw
    ):
        raise MappingError(
            f"{where}: shape must be a list of integers, like [8, 8, 1], got {raw!r}"
        )
    dims = tuple(raw)
    if any(d == 0 or d < -1 for d in dims):
        raise MappingError(f"{where}: dimensions are positive, or -1 for a ragged one: {raw!r}")
    if -1 in dims[1:]:
        raise MappingError(f"{where}: only the first dimension may be ragged (-1): {raw!r}")
    return dims


def parse_inputs(raw: Any) -> dict[str, TensorInput]:
    """The ``inputs`` config: ``{model_input: {field, dtype, shape, pad, max_len}}``."""
    if not isinstance(raw, Mapping):
        raise MappingError(f"expected a mapping of model input names, got {raw!r}")
    out: dict[str, TensorInput] = {}
    for name, spec in raw.items():
        where = f"input {name!r}"
        if isinstance(spec, str):
            spec = {"field": spec}
        if not isinstance(spec, Mapping):
            raise MappingError(f"{where}: expected {{field: ..., dtype: ..., shape: ...}}")
        unknown = set(spec) - {"field", "fields", "dtype", "shape", "pad", "max_len"}
        if unknown:
            raise MappingError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                "(known: field, fields, dtype, shape, pad, max_len)"
            )
        fields = spec.get("fields") or ([spec["field"]] if spec.get("field") else [])
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise MappingError(f"{where}: name the record field it comes from (field: NAME)")
        dtype = str(spec.get("dtype", "float32"))
        if dtype not in DTYPES:
            raise MappingError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        shape = _shape(spec.get("shape"), where)
        if "fields" in spec:
            if shape not in ((), (len(fields),)) or dtype not in NUMERIC:
                raise MappingError(
                    f"{where}: stacked fields make a numeric vector of shape [{len(fields)}]"
                )
            shape = (len(fields),)
        max_len = spec.get("max_len", 0)
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 0:
            raise MappingError(f"{where}: max_len must be a positive integer")
        if max_len and not (shape and shape[0] == -1):
            raise MappingError(f"{where}: max_len applies to a ragged shape such as [-1]")
        default_pad = {"string": "", "bytes": b"", "bool": False}.get(dtype, 0)
        pad = _pad(spec.get("pad", default_pad), dtype, where)
        out[str(name)] = TensorInput(
            str(name), tuple(fields), dtype, shape, pad, max_len, stacked="fields" in spec
        )
    return out


def _pad(pad: Any, dtype: str, where: str) -> Any:
    """The padding value, checked against the dtype it pads."""
    if dtype == "string" and isinstance(pad, str):
        return pad
    if dtype == "bytes" and isinstance(pad, str | bytes):
        return pad.encode() if isinstance(pad, str) else pad
    numeric = isinstance(pad, int | float) and not isinstance(pad, bool)
    if dtype == "bool" and (isinstance(pad, bool) or pad in (0, 1)):
        return bool(pad)
    if dtype in ("int32", "int64") and numeric and float(pad).is_integer():
        return int(pad)
    if dtype in ("float32", "float64") and numeric:
        return float(pad)
    raise MappingError(f"{where}: pad {pad!r} is not a value of dtype {dtype}")


def parse_outputs(raw: Any) -> dict[str, TensorOutput]:
    """The ``outputs`` config: ``{model_output: {field, transform, k, labels, threshold}}``.

    A list of such specs writes one model output to several fields (scores and a class).
    The result is keyed ``name`` for a single spec and ``name#i`` for each of a list.
    """
    if not isinstance(raw, Mapping):
        raise MappingError(f"expected a mapping of model output names, got {raw!r}")
    out: dict[str, TensorOutput] = {}
    for name, specs in raw.items():
        if isinstance(specs, list):
            if not specs:
                raise MappingError(f"output {name!r}: an empty list writes nothing")
            for index, spec in enumerate(specs):
                out[f"{name}#{index}"] = _parse_output(str(name), spec)
        else:
            out[str(name)] = _parse_output(str(name), specs)
    fields = [o.field for o in out.values()]
    twice = sorted({f for f in fields if fields.count(f) > 1})
    if twice:
        raise MappingError(f"field(s) {', '.join(twice)} written by more than one output")
    return out


def _parse_output(name: str, spec: Any) -> TensorOutput:
    where = f"output {name!r}"
    if isinstance(spec, str):
        spec = {"field": spec}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("field"), str):
        raise MappingError(f"{where}: expected {{field: NAME, transform: raw|argmax|...}}")
    unknown = set(spec) - {"field", "transform", "k", "labels", "threshold"}
    if unknown:
        raise MappingError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
            "(known: field, transform, k, labels, threshold)"
        )
    transform = str(spec.get("transform", "raw"))
    if transform not in TRANSFORMS:
        raise MappingError(
            f"{where}: transform {transform!r} is not one of {', '.join(TRANSFORMS)}"
        )
    k = spec.get("k", 1 if transform != "top_k" else 3)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise MappingError(f"{where}: k must be a positive integer")
    labels = spec.get("labels", [])
    if not isinstance(labels, list | tuple) or not all(isinstance(x, str) for x in labels):
        raise MappingError(f"{where}: labels must be a list of strings")
    threshold = spec.get("threshold", 0.5)
    if not isinstance(threshold, int | float) or isinstance(threshold, bool):
        raise MappingError(f"{where}: threshold must be a number")
    return TensorOutput(name, spec["field"], transform, k, tuple(labels), float(threshold))


# -- what a model declares -------------------------------------------------------------


#: ``TensorSpec.kind`` of a tensor, and of a sequence of {class: probability} maps (what
#: skl2onnx's ZipMap makes of a classifier's probabilities), which the predictor reads
#: into a [batch, classes] float32 tensor, the classes in sorted order.
TENSOR = "tensor"
ZIPMAP = "zipmap"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A model's input or output: dtype (one of DTYPES, or "" if unknown), shape with batch.

    Unknown dimensions are -1; an unknown rank is ``None``. ``kind`` is :data:`TENSOR`,
    :data:`ZIPMAP`, or the model's own name for any other type (one that cannot be served).
    """

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    kind: str = TENSOR

    @property
    def readable(self) -> bool:
        return self.kind in (TENSOR, ZIPMAP)

    def describe(self) -> str:
        if self.kind == ZIPMAP:
            return f"{self.name} {{class: probability}} per record (a ZipMap)"
        if self.kind != TENSOR:
            return f"{self.name} {self.kind} (not a tensor)"
        shape = list(self.shape) if self.shape is not None else "[?]"
        return f"{self.name} {self.dtype or '?'}{shape}"


@dataclasses.dataclass(frozen=True)
class ModelSignature:
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]

    def describe(self) -> str:
        def side(specs: dict[str, TensorSpec]) -> str:
            return ", ".join(s.describe() for s in specs.values()) or "none"

        return f"inputs: {side(self.inputs)}; outputs: {side(self.outputs)}"
