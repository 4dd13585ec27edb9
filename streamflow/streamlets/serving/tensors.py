"""The tensor mapping: which record fields become which named model inputs, and back.

Models speak named, typed tensors (TF Serving, KServe and Triton all do); records
speak Avro fields. A :class:`TensorMapping` is the one translation between them,
read from a streamlet's ``inputs``/``outputs`` config (or the ``input_fields``
shorthand: one stacked float32 input) and shared by serving, drift and explain,
so all three see the same tensors.

Three checks happen at three times, each as early as it can be:

- the config's own form (dtypes, shapes, transforms) when the parameter is
  parsed, so ``streamflow verify`` reports it at the value's line;
- the fields against the port schemas, also at verify (:func:`check_schemas`);
- the model's signature (names, dtypes, per-record shapes) when a descriptor is
  applied (:meth:`TensorMapping.bind`), so a mismatch fails the load and the old
  model keeps serving.

Encoding is vectorised per batch: one ``np.asarray`` per input over the whole
batch. Only when that fails does it go record by record, to find exactly the
records that are wrong; their errors come back by index, and the rest of the
batch is served.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DTYPES",
    "ONLY",
    "TRANSFORMS",
    "BoundMapping",
    "MappingError",
    "ModelSignature",
    "RecordErrors",
    "SchemaProblem",
    "TensorInput",
    "TensorMapping",
    "TensorOutput",
    "TensorSpec",
    "check_schemas",
    "parse_inputs",
    "parse_outputs",
    "scalar_fields",
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
    """A mapping that cannot work: bad config, a field it cannot read, a model it does not fit."""


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
    raise MappingError(f"{where}: pad {pad!r} is not a {dtype} value")


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


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A model's input or output: dtype (one of DTYPES, or "" if unknown), shape with batch.

    Unknown dimensions are -1; an unknown rank is ``None``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True)
class ModelSignature:
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]

    def describe(self) -> str:
        def side(specs: dict[str, TensorSpec]) -> str:
            return ", ".join(
                f"{s.name} {s.dtype or '?'}{list(s.shape) if s.shape is not None else '[?]'}"
                for s in specs.values()
            )

        return f"inputs: {side(self.inputs)}; outputs: {side(self.outputs)}"


# -- the mapping ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TensorMapping:
    """The declared mapping; :meth:`bind` fits it to one model's signature."""

    inputs: dict[str, TensorInput]
    outputs: dict[str, TensorOutput]

    @classmethod
    def from_config(
        cls,
        *,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        input_fields: Sequence[str] = (),
        output_field: str = "",
        class_field: str = "",
    ) -> TensorMapping:
        """From the ``inputs``/``outputs`` config, or the older flat-float shorthand."""
        if inputs and input_fields:
            raise MappingError("set inputs or input_fields, not both")
        if inputs:
            parsed_in = parse_inputs(inputs)
        elif input_fields:
            parsed_in = {
                ONLY: TensorInput(
                    ONLY, tuple(input_fields), "float32", (len(input_fields),), stacked=True
                )
            }
        else:
            raise MappingError(
                "set inputs (model input -> record field) or input_fields (flat float features)"
            )
        parsed_out = parse_outputs(outputs) if outputs else {}
        if not parsed_out:
            shorthand: dict[str, Any] = {}
            if output_field:
                shorthand[output_field] = TensorOutput(ONLY, output_field)
            if class_field:
                shorthand[class_field] = TensorOutput(ONLY, class_field, "argmax")
            return cls(parsed_in, {f"{ONLY}#{f}": o for f, o in shorthand.items()})
        return cls(parsed_in, parsed_out)

    def bind(self, signature: ModelSignature | None) -> BoundMapping:
        """This mapping fitted to a model; :class:`MappingError` lists every mismatch."""
        problems: list[str] = []
        inputs = _bind_side(
            {name: spec for name, spec in self.inputs.items()},
            signature.inputs if signature else None,
            "input",
            problems,
        )
        outputs = _bind_side(
            {key: out for key, out in self.outputs.items()},
            signature.outputs if signature else None,
            "output",
            problems,
        )
        if signature is not None:
            fed = {model_name for model_name, _ in inputs.values()}
            missing = [n for n in signature.inputs if n not in fed]
            if missing:
                problems.append(
                    f"the model also needs input(s) {', '.join(missing)}, which the mapping "
                    "does not feed"
                )
            for key, (model_name, _) in inputs.items():
                declared = signature.inputs.get(model_name)
                if declared is not None:
                    _check_input(self.inputs[key], declared, problems)
        if problems:
            detail = f" (the model has {signature.describe()})" if signature else ""
            raise MappingError("; ".join(problems) + detail)
        return BoundMapping(
            inputs={model_name: self.inputs[key] for key, (model_name, _) in inputs.items()},
            outputs=[(model_name, self.outputs[key]) for key, (model_name, _) in outputs.items()],
            signature=signature,
        )


def _bind_side(
    declared: Mapping[str, Any],
    model: Mapping[str, TensorSpec] | None,
    side: str,
    problems: list[str],
) -> dict[str, tuple[str, Any]]:
    """Each declared entry's model name: ONLY resolves to the model's only tensor."""
    out: dict[str, tuple[str, Any]] = {}
    for key, spec in declared.items():
        name = spec.name
        if model is None:
            out[key] = (name, spec)
            continue
        if name == ONLY:
            if len(model) != 1:
                problems.append(
                    f"the model has {len(model)} {side}s ({', '.join(model)}); name each one "
                    f"in the {side}s mapping"
                )
                continue
            name = next(iter(model))
        elif name not in model:
            problems.append(f"the model has no {side} {name!r}")
            continue
        out[key] = (name, spec)
    return out


def _check_input(mapped: TensorInput, declared: TensorSpec, problems: list[str]) -> None:
    text = ("string", "bytes")  # servers and TensorFlow do not tell the two apart
    if declared.dtype in text and mapped.dtype in text:
        pass
    elif declared.dtype and declared.dtype != mapped.dtype:
        problems.append(
            f"input {declared.name!r} is {declared.dtype} in the model, "
            f"{mapped.dtype} in the mapping"
        )
    if declared.shape is None:
        return
    model_dims = declared.shape[1:]
    if len(model_dims) != len(mapped.shape):
        problems.append(
            f"input {declared.name!r} has per-record shape {list(model_dims)} in the model, "
            f"{list(mapped.shape)} in the mapping"
        )
        return
    if mapped.ragged and model_dims[0] != -1 and mapped.max_len != model_dims[0]:
        problems.append(
            f"input {declared.name!r} takes sequences of exactly {model_dims[0]}; set "
            f"max_len: {model_dims[0]} in the mapping (it pads and cuts to that length)"
        )
        return
    for ours, theirs in zip(mapped.shape, model_dims, strict=True):
        if ours != -1 and theirs != -1 and ours != theirs:
            problems.append(
                f"input {declared.name!r} has per-record shape {list(model_dims)} in the model, "
                f"{list(mapped.shape)} in the mapping"
            )
            return


@dataclasses.dataclass(frozen=True)
class BoundMapping:
    """A mapping fitted to one model: model names resolved, ready to encode and decode."""

    inputs: dict[str, TensorInput]  # by the model's input name
    outputs: list[tuple[str, TensorOutput]]  # (the model's output name, where it goes)
    signature: ModelSignature | None

    @property
    def output_names(self) -> list[str]:
        return list(dict.fromkeys(name for name, _ in self.outputs))

    def encode(self, values: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """The batch's input tensors; :class:`RecordErrors` names the records that do not fit."""
        try:
            return {name: _encode(spec, values) for name, spec in self.inputs.items()}
        except (MappingError, ValueError, TypeError, KeyError, OverflowError):
            pass
        errors: dict[int, str] = {}
        for index, value in enumerate(values):
            try:
                for spec in self.inputs.values():
                    _encode(spec, [value])
            except (MappingError, ValueError, TypeError, KeyError, OverflowError) as exc:
                errors[index] = _reason(exc)
        if not errors:  # only the batch as a whole failed: ragged rows of different lengths
            raise MappingError("the batch's records do not stack into one tensor")
        raise RecordErrors(errors)

    def zeros(self, batch: int) -> dict[str, np.ndarray]:
        """Inputs of the right dtypes and shapes, for warming a model up."""
        out: dict[str, np.ndarray] = {}
        for name, spec in self.inputs.items():
            dims = tuple(spec.max_len or 4 if d == -1 else d for d in spec.shape)
            if spec.dtype in ("string", "bytes"):
                fill: Any = "" if spec.dtype == "string" else b""
                out[name] = np.full((batch, *dims), fill, dtype=object)
            else:
                out[name] = np.zeros((batch, *dims), dtype=DTYPES[spec.dtype])
        return out

    def decode(
        self,
        outputs: Mapping[str, np.ndarray],
        rows: int,
        *,
        scalar_fields: frozenset[str] = frozenset(),
    ) -> list[dict[str, Any]]:
        """One dict of output fields per record, from the model's named outputs.

        A ``raw`` output of one value per record written to a field in
        ``scalar_fields`` (a number in the schema) is written as that number.
        """
        columns: dict[str, list[Any]] = {}
        unnamed = list(outputs) == [ONLY] and len(self.output_names) == 1
        for name, spec in self.outputs:
            if name == ONLY and len(outputs) == 1:
                name = next(iter(outputs))  # the mapping says "the only output"
            elif unnamed:
                name = ONLY  # a V1 server answers one output's rows without its name
            if name not in outputs:
                raise MappingError(
                    f"the model returned outputs {', '.join(sorted(outputs))}, not {name!r}"
                )
            tensor = np.asarray(outputs[name])
            if tensor.ndim == 0 or tensor.shape[0] != rows:
                raise MappingError(
                    f"output {name!r} has shape {list(tensor.shape)}; expected {rows} rows"
                )
            if spec.transform == "raw" and spec.field in scalar_fields:
                tensor = tensor.reshape(rows, -1)
                if tensor.shape[1] != 1:
                    raise MappingError(
                        f"output {name!r} has {tensor.shape[1]} values per record; field "
                        f"{spec.field!r} holds one number"
                    )
                tensor = tensor[:, 0]
            columns[spec.field] = _transform(spec, tensor)
        fields = list(columns)
        return [dict(zip(fields, row, strict=True)) for row in zip(*columns.values(), strict=True)]


class RecordErrors(MappingError):
    """Some records of a batch cannot be encoded: ``errors`` maps their index to why."""

    def __init__(self, errors: dict[int, str]) -> None:
        self.errors = errors
        first = next(iter(errors.items()))
        super().__init__(f"{len(errors)} record(s) do not fit the mapping; #{first[0]}: {first[1]}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"the record has no field {exc.args[0]!r}"
    return str(exc)


def _encode(spec: TensorInput, values: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """One input tensor for a batch of record values (raises on the first bad one)."""
    if spec.stacked:
        rows = [[value[f] for f in spec.fields] for value in values]
        if any(x is None for row in rows for x in row):
            missing = next(f for v in values for f in spec.fields if v[f] is None)
            raise MappingError(f"field {missing!r} is null")
        return _cast(np.asarray(rows), spec.dtype, "+".join(spec.fields))
    field = spec.field
    column = [value[field] for value in values]
    if any(x is None for x in column):
        raise MappingError(f"field {field!r} is null")
    if spec.dtype in ("string", "bytes"):
        return _text(spec, column)
    if column and isinstance(column[0], bytes | bytearray):
        return _raw_tensors(spec, column)
    if spec.ragged:
        return _padded(spec, column)
    array = _cast(np.asarray(column), spec.dtype, field)
    if array.shape[1:] != spec.shape:
        bad = next(
            (i for i, x in enumerate(column) if np.shape(x) != spec.shape), 0
        )  # which record, for the message
        raise MappingError(
            f"field {field!r} has shape {list(np.shape(column[bad]))}; the mapping expects "
            f"{list(spec.shape)}"
        )
    return array


def _cast(array: np.ndarray, dtype: str, field: str) -> np.ndarray:
    """``array`` as ``dtype``, refusing what the cast would change: fractions or values out
    of range for an integer input, anything but 0/1 for a bool one."""
    target = np.dtype(DTYPES[dtype])
    if array.dtype == object or array.dtype.kind in "US":
        raise MappingError(f"field {field!r} does not hold numbers of one shape")
    if target.kind in "iu" and array.dtype.kind in "fiub":
        if array.dtype.kind == "f" and not np.array_equal(array, np.floor(array)):
            raise MappingError(f"field {field!r} holds fractions; the mapping expects {dtype}")
        limits = np.iinfo(target)
        if array.size and (array.min() < limits.min or array.max() > limits.max):
            raise MappingError(f"field {field!r} holds values out of the range of {dtype}")
    if target.kind == "b" and array.dtype.kind != "b" and not np.isin(array, (0, 1)).all():
        raise MappingError(f"field {field!r} holds values other than 0 and 1 for a bool")
    return array.astype(target, copy=False)


def _text(spec: TensorInput, column: list[Any]) -> np.ndarray:
    kind = str if spec.dtype == "string" else bytes
    if spec.ragged:
        return _padded(spec, column)
    for x in column if not spec.shape else []:
        if not isinstance(x, kind):
            raise MappingError(f"field {spec.field!r} is a {type(x).__name__}, not {spec.dtype}")
    array = np.empty((len(column),), dtype=object)
    array[:] = column
    if spec.shape:
        array = np.asarray(column, dtype=object)
        if array.shape[1:] != spec.shape:
            raise MappingError(f"field {spec.field!r} does not have shape {list(spec.shape)}")
    return array


def _raw_tensors(spec: TensorInput, column: list[Any]) -> np.ndarray:
    """``bytes`` fields holding a little-endian tensor of the mapping's dtype and shape."""
    if spec.ragged:
        raise MappingError(f"field {spec.field!r}: a raw-bytes tensor needs a fixed shape")
    dtype = np.dtype(DTYPES[spec.dtype]).newbyteorder("<")
    size = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
    for x in column:
        if not isinstance(x, bytes | bytearray) or len(x) != size:
            length = len(x) if isinstance(x, bytes | bytearray) else type(x).__name__
            raise MappingError(
                f"field {spec.field!r} holds {length} bytes; a {spec.dtype} tensor of shape "
                f"{list(spec.shape)} is {size} bytes"
            )
    flat = np.frombuffer(b"".join(column), dtype=dtype)
    return flat.reshape(len(column), *spec.shape).astype(DTYPES[spec.dtype])


def _padded(spec: TensorInput, column: list[Any]) -> np.ndarray:
    """Ragged sequences, cut to ``max_len`` and padded with ``pad`` to a common length."""
    inner = spec.shape[1:]
    text = spec.dtype in ("string", "bytes")
    rows = []
    for x in column:
        if not isinstance(x, list | tuple):
            raise MappingError(f"field {spec.field!r} is a {type(x).__name__}, not a sequence")
        row = np.asarray(x, dtype=object) if text else _cast(np.asarray(x), spec.dtype, spec.field)
        if row.ndim == 0 or row.shape[1:] != inner:
            raise MappingError(
                f"field {spec.field!r} has items of shape {list(row.shape[1:])}; "
                f"expected {list(inner)}"
            )
        rows.append(row[: spec.max_len] if spec.max_len else row)
    length = spec.max_len or max((len(r) for r in rows), default=0)
    out = np.full(
        (len(rows), length, *inner), spec.pad, dtype=object if text else DTYPES[spec.dtype]
    )
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def _transform(spec: TensorOutput, tensor: np.ndarray) -> list[Any]:
    """The output field's value for each row of ``tensor``."""
    if spec.transform == "raw":
        if tensor.dtype == object:
            return [_text_value(x) for x in tensor.tolist()]
        kept = tensor if tensor.dtype.kind in "iub" else tensor.astype(np.float64)
        values: list[Any] = kept.tolist()
        return values
    flat = tensor.reshape(tensor.shape[0], -1).astype(np.float64)
    labels = spec.labels
    if labels and flat.shape[1] != len(labels) and spec.transform != "threshold":
        raise MappingError(
            f"output {spec.name!r} has {flat.shape[1]} values per record but {len(labels)} labels"
        )
    if spec.transform == "argmax":
        best = flat.argmax(axis=1).tolist()
        return [labels[i] for i in best] if labels else best
    if spec.transform == "top_k":
        k = min(spec.k, flat.shape[1])
        order = np.argsort(-flat, axis=1, kind="stable")[:, :k]
        return [
            [{"label": labels[i] if labels else str(i), "score": float(row[i])} for i in order_row]
            for row, order_row in zip(flat.tolist(), order.tolist(), strict=True)
        ]
    above = flat >= spec.threshold
    decided: list[Any] = above[:, 0].tolist() if flat.shape[1] == 1 else above.tolist()
    return decided


def _text_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_text_value(x) for x in value]
    return value


# -- the mapping against the port schemas (verify) -----------------------------------------


@dataclasses.dataclass(frozen=True)
class SchemaProblem:
    code: str  # unknown-tensor-field | tensor-field-type
    param: str  # the config parameter it is about: inputs, outputs or input_fields
    message: str
    hint: str = ""
    path: tuple[str | int, ...] = ()  # where inside the parameter's value


_AVRO_NUMERIC = ("int", "long", "float", "double", "boolean")


def _fields(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {str(f["name"]): f["type"] for f in schema.get("fields", [])}


def _unwrap(avro: Any) -> Any:
    """A nullable union's non-null branch; a named type's definition stays as it is."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return _unwrap(branches[0]) if len(branches) == 1 else avro
    if isinstance(avro, Mapping) and avro.get("type") in (*_AVRO_NUMERIC, "string", "bytes"):
        return avro["type"]  # {"type": "long", "logicalType": ...}
    return avro


def _type_name(avro: Any) -> str:
    avro = _unwrap(avro)
    if isinstance(avro, str):
        return avro
    if isinstance(avro, Mapping):
        if avro.get("type") == "array":
            return f"array<{_type_name(avro['items'])}>"
        return str(avro.get("type"))
    return "union"


def _array_depth(avro: Any) -> tuple[int, Any]:
    depth = 0
    avro = _unwrap(avro)
    while isinstance(avro, Mapping) and avro.get("type") == "array":
        depth += 1
        avro = _unwrap(avro["items"])
    return depth, avro


def _input_fits(spec: TensorInput, avro: Any, *, stacked: bool) -> str | None:
    """Why the field's Avro type cannot feed ``spec``, or None when it can."""
    base = _unwrap(avro)
    if stacked:
        return None if base in _AVRO_NUMERIC else "a stacked field must be a number"
    if spec.dtype in ("string", "bytes"):
        want = "string" if spec.dtype == "string" else "bytes"
        depth, leaf = _array_depth(avro)
        leaf_ok = leaf == want or (
            want == "string" and isinstance(leaf, Mapping) and leaf.get("type") == "enum"
        )
        leaf_ok = leaf_ok or (
            want == "bytes" and isinstance(leaf, Mapping) and leaf.get("type") == "fixed"
        )
        if depth == len(spec.shape) and leaf_ok:
            return None
        return f"a {spec.dtype} input of shape {list(spec.shape)} needs " + (
            want if not spec.shape else f"{'array<' * len(spec.shape)}{want}{'>' * len(spec.shape)}"
        )
    if base == "bytes" and spec.shape and not spec.ragged:
        return None  # a raw little-endian tensor
    depth, leaf = _array_depth(avro)
    if depth == len(spec.shape) and leaf in _AVRO_NUMERIC:
        return None
    nested = "array<" * len(spec.shape) + "number" + ">" * len(spec.shape)
    alternative = " or bytes (a raw little-endian tensor)" if spec.shape and not spec.ragged else ""
    return f"a {spec.dtype} input of shape {list(spec.shape)} needs {nested}{alternative}"


def _output_fits(spec: TensorOutput, avro: Any) -> str | None:
    base = _unwrap(avro)
    depth, leaf = _array_depth(avro)
    if spec.transform == "raw":
        if leaf in _AVRO_NUMERIC or leaf in ("string", "bytes"):
            return None
        return "a raw output needs a number, a string or (nested) arrays of them"
    if spec.transform == "argmax":
        if spec.labels:
            return None if base == "string" else "argmax with labels writes a label (string)"
        return None if base in ("int", "long") else "argmax writes a class index (int or long)"
    if spec.transform == "threshold":
        if base == "boolean" or (depth == 1 and leaf == "boolean"):
            return None
        return "threshold writes a boolean (or array<boolean> for several scores)"
    item = leaf if depth == 1 else None
    if isinstance(item, Mapping) and item.get("type") == "record":
        names = {str(f["name"]): _unwrap(f["type"]) for f in item.get("fields", [])}
        if names.get("label") == "string" and names.get("score") in ("float", "double"):
            return None
    return "top_k writes array<record {label: string, score: double}>"


def check_schemas(
    mapping: TensorMapping,
    *,
    input_schema: Mapping[str, Any] | None,
    output_schema: Mapping[str, Any] | None,
    input_param: str = "inputs",
    output_param: str = "outputs",
) -> list[SchemaProblem]:
    """Every mapped field exists in its port's schema, with an Avro type that fits."""
    problems: list[SchemaProblem] = []
    if input_schema is not None:
        available = _fields(input_schema)
        for spec in mapping.inputs.values():
            for index, field in enumerate(spec.fields):
                path = _input_path(spec, index)
                if field not in available:
                    problems.append(
                        SchemaProblem(
                            "unknown-tensor-field",
                            input_param,
                            f"input {spec.name or field!r} reads field {field!r}, which "
                            f"{input_schema.get('name')} does not have",
                            f"its fields are: {', '.join(available)}",
                            path,
                        )
                    )
                    continue
                why = _input_fits(spec, available[field], stacked=spec.stacked)
                if why:
                    problems.append(
                        SchemaProblem(
                            "tensor-field-type",
                            input_param,
                            f"field {field!r} is {_type_name(available[field])}; {why}",
                            path=path,
                        )
                    )
    if output_schema is not None:
        available = _fields(output_schema)
        for key, out in mapping.outputs.items():
            path = _output_path(key)
            if out.field not in available:
                problems.append(
                    SchemaProblem(
                        "unknown-tensor-field",
                        output_param,
                        f"output {out.name or '(the only output)'} writes field {out.field!r}, "
                        f"which {output_schema.get('name')} does not have",
                        f"its fields are: {', '.join(available)}",
                        path,
                    )
                )
                continue
            why = _output_fits(out, available[out.field])
            if why:
                problems.append(
                    SchemaProblem(
                        "tensor-field-type",
                        output_param,
                        f"field {out.field!r} is {_type_name(available[out.field])}; {why}",
                        path=path,
                    )
                )
    return problems


def _input_path(spec: TensorInput, index: int) -> tuple[str | int, ...]:
    """Where a field of ``spec`` is written: under inputs, or in the input_fields list."""
    if spec.name == ONLY:
        return (index,)
    return (spec.name, "fields", index) if spec.stacked else (spec.name, "field")


def _output_path(key: str) -> tuple[str | int, ...]:
    name, _, index = key.partition("#")
    if not name:  # the output_field / class_field shorthand
        return ()
    return (name, int(index), "field") if index else (name, "field")


def scalar_fields(schema: Mapping[str, Any]) -> frozenset[str]:
    """The fields of a record schema that hold one number (or boolean)."""
    return frozenset(n for n, avro in _fields(schema).items() if _unwrap(avro) in _AVRO_NUMERIC)
