"""The tensor mapping against the port schemas: what ``streamflow verify`` checks.

Each mapped field must exist in its port's Avro schema with a type that can
feed the input's dtype and shape (or hold the output transform's result).
Problems carry a stable code and the path of the mapping entry, so the
verifier points at the exact line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from streamflow.models.tensor_specs import ONLY, TensorInput, TensorOutput

__all__ = ["SchemaProblem", "check_schemas", "scalar_fields"]


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
        if base in ("int", "long"):
            return None
        return "argmax writes a class index (int or long); with labels set, a label (string)"
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


class MappedTensors(Protocol):
    """What the checks read of a :class:`~.tensors.TensorMapping` (which imports this)."""

    @property
    def inputs(self) -> Mapping[str, TensorInput]: ...

    @property
    def outputs(self) -> Mapping[str, TensorOutput]: ...


def check_schemas(
    mapping: MappedTensors,
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
