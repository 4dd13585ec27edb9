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

This module is the mapping; what it is made of lives beside it, re-exported
here: the declarations (:mod:`.tensor_specs`), the array work
(:mod:`.tensor_arrays`) and the schema checks (:mod:`.tensor_schemas`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.models import tensor_fit
from streamflow.models.tensor_arrays import (
    describe_error,
    encode_input,
    encode_input_columns,
    output_column,
    transform_output,
)
from streamflow.models.tensor_fit import LABEL_NAMES, PROBABILITY_NAMES
from streamflow.models.tensor_schemas import (
    SchemaProblem,
    check_schemas,
    scalar_fields,
)
from streamflow.models.tensor_specs import (
    DTYPES,
    ONLY,
    TENSOR,
    TRANSFORMS,
    ZIPMAP,
    MappingError,
    ModelSignature,
    RecordErrors,
    TensorInput,
    TensorOutput,
    TensorSpec,
    parse_inputs,
    parse_outputs,
)

__all__ = [
    "DTYPES",
    "LABEL_NAMES",
    "ONLY",
    "PROBABILITY_NAMES",
    "TENSOR",
    "TRANSFORMS",
    "ZIPMAP",
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
                shorthand[output_field] = TensorOutput(ONLY, output_field, role="scores")
            if class_field:
                shorthand[class_field] = TensorOutput(ONLY, class_field, "argmax", role="class")
            return cls(parsed_in, {f"{ONLY}#{f}": o for f, o in shorthand.items()})
        return cls(parsed_in, parsed_out)

    def bind(self, signature: ModelSignature | None) -> BoundMapping:
        """This mapping fitted to a model; :class:`MappingError` lists every mismatch once,
        with the model's signature and the fix (:mod:`.tensor_fit`)."""
        problems = tensor_fit.Problems()
        inputs = tensor_fit.bind_inputs(self.inputs, signature, problems)
        outputs = tensor_fit.bind_outputs(self.outputs, signature, problems)
        if problems:
            raise problems.error(signature)
        return BoundMapping(inputs=inputs, outputs=outputs, signature=signature)


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
            return {name: encode_input(spec, values) for name, spec in self.inputs.items()}
        except (MappingError, ValueError, TypeError, KeyError, OverflowError):
            pass
        errors: dict[int, str] = {}
        for index, value in enumerate(values):
            try:
                for spec in self.inputs.values():
                    encode_input(spec, [value])
            except (MappingError, ValueError, TypeError, KeyError, OverflowError) as exc:
                errors[index] = describe_error(exc)
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
        columns = {
            spec.field: transform_output(spec, tensor)
            for spec, tensor in self._output_tensors(outputs, rows, scalar_fields)
        }
        fields = list(columns)
        return [dict(zip(fields, row, strict=True)) for row in zip(*columns.values(), strict=True)]

    def encode_columns(self, columns: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The batch's input tensors straight from its columns (:mod:`streamflow.api.columns`),
        or None when a column is not plain numbers of the mapping's shape: then
        :meth:`encode` over the records says which records do not fit."""
        tensors: dict[str, np.ndarray] = {}
        for name, spec in self.inputs.items():
            tensor = encode_input_columns(spec, columns)
            if tensor is None:
                return None
            tensors[name] = tensor
        return tensors

    def decode_columns(
        self,
        outputs: Mapping[str, np.ndarray],
        rows: int,
        *,
        scalar_fields: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """The output fields as columns, one row per record: :meth:`decode`'s values."""
        return {
            spec.field: output_column(spec, tensor)
            for spec, tensor in self._output_tensors(outputs, rows, scalar_fields)
        }

    def _output_tensors(
        self, outputs: Mapping[str, np.ndarray], rows: int, scalar_fields: frozenset[str]
    ) -> list[tuple[TensorOutput, np.ndarray]]:
        """Each mapped output with its tensor, checked to have a row per record."""
        found: list[tuple[TensorOutput, np.ndarray]] = []
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
            found.append((spec, tensor))
        return found
