"""The detector's view of the model's inputs: scalar fields, tensors and text, as row columns.

The detector reads the same tensor mapping as serving (``inputs``: model
input -> field, dtype, shape), through the same encoder
(:meth:`~streamflow.models.tensors.BoundMapping.encode`), so it
tests exactly the tensors the model is fed, padding and all. Each input then
becomes columns of a window's rows:

* a numeric tensor (``[64]``, ``[8, 8, 1]``, a padded ``[-1]`` with ``max_len``)
  is flattened into one numeric column per element, named ``image[3,4,0]``,
  after the scalar features; its element columns are also tested together;
* a string or bytes input becomes one text column holding each record's tokens.

A record the mapping cannot read (a missing field, a wrong shape) is counted
and left out of the tests of that input (NaN elements, no tokens); it never
stops the detector, which is not the serving path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.api.columns import ColumnBatch
from streamflow.api.streamlet import ConfigProblem
from streamflow.models import tensors as tensormap
from streamflow.schema.column_values import python_values
from streamflow.streamlets.drift import text

__all__ = ["Layout", "TensorColumns", "config_problems", "layout", "read", "read_columns"]

TEXT_DTYPES = ("string", "bytes")


@dataclasses.dataclass(frozen=True)
class TensorColumns:
    """A numeric tensor input: its columns in the numeric matrix, and their names."""

    name: str
    start: int
    stop: int
    elements: tuple[str, ...]

    @property
    def columns(self) -> slice:
        return slice(self.start, self.stop)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Which columns of a window's rows hold which feature."""

    scalars: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    tensors: tuple[TensorColumns, ...] = ()
    texts: tuple[str, ...] = ()
    specs: tuple[tensormap.TensorInput, ...] = ()

    @property
    def numeric(self) -> tuple[str, ...]:
        """Every numeric column's name: the scalar features, then the tensors' elements."""
        return self.scalars + tuple(e for t in self.tensors for e in t.elements)

    @property
    def widths(self) -> tuple[int, int, int]:
        return len(self.numeric), len(self.categorical), len(self.texts)

    @property
    def mapping(self) -> tensormap.BoundMapping | None:
        if not self.specs:
            return None
        return tensormap.TensorMapping({s.name: s for s in self.specs}, {}).bind(None)


def layout(
    *,
    numeric: Sequence[str] = (),
    categorical: Sequence[str] = (),
    specs: Sequence[tensormap.TensorInput] = (),
) -> Layout:
    """The columns for scalar features and mapped inputs, in that order."""
    start = len(numeric)
    columns: list[TensorColumns] = []
    texts: list[str] = []
    for spec in specs:
        if spec.dtype in TEXT_DTYPES:
            texts.append(spec.name)
            continue
        elements = element_names(spec)
        columns.append(TensorColumns(spec.name, start, start + len(elements), elements))
        start += len(elements)
    return Layout(tuple(numeric), tuple(categorical), tuple(columns), tuple(texts), tuple(specs))


def element_names(spec: tensormap.TensorInput) -> tuple[str, ...]:
    """``name[i,j,k]`` for each element of a record's tensor (``name[field]`` when stacked)."""
    if spec.stacked:
        return tuple(f"{spec.name}[{f}]" for f in spec.fields)
    shape = tuple(spec.max_len if d == -1 else d for d in spec.shape)
    if not shape:
        return (spec.name,)
    return tuple(f"{spec.name}[{','.join(map(str, i))}]" for i in np.ndindex(*shape))


def problems(specs: Sequence[tensormap.TensorInput], fields: set[str] | None) -> list[str]:
    """What stops the detector from testing these inputs."""
    out = []
    for spec in specs:
        if spec.dtype not in TEXT_DTYPES and spec.ragged and not spec.max_len:
            out.append(
                f"input {spec.name!r}: a ragged numeric input needs max_len, so that every "
                "window compares the same elements"
            )
        missing = [f for f in spec.fields if fields is not None and f not in fields]
        if missing:
            out.append(
                f"input {spec.name!r} reads field {', '.join(repr(m) for m in missing)}, which "
                f"the input records do not have (they have: {', '.join(sorted(fields or ()))})"
            )
    return out


def read(
    values: Sequence[Mapping[str, Any]], shape: Layout
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(numeric, categorical and text columns of these records, how many the mapping refused)."""
    n = len(values)
    numeric = np.full((n, len(shape.numeric)), np.nan)
    for column, name in enumerate(shape.scalars):
        numeric[:, column] = [_number(v.get(name)) for v in values]
    mapping = shape.mapping
    good, arrays = _encode(mapping, values) if mapping is not None and n else _NONE
    return _finish(numeric, values, shape, good, arrays)


def read_columns(
    batch: ColumnBatch, shape: Layout
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`read`'s answer for a batch decoded as columns: numbers and tensors straight
    from its arrays (a tensor's records one by one only where a column is not plain
    numbers of its shape, as :func:`read` would find them)."""
    n = batch.n
    numeric = np.full((n, len(shape.numeric)), np.nan)
    for column, name in enumerate(shape.scalars):
        if name in batch:
            numeric[:, column] = _numbers(batch[name])
    mapping = shape.mapping
    good, arrays = _NONE
    if mapping is not None and n:
        tensors = mapping.encode_columns(batch)
        if tensors is not None:
            good, arrays = np.arange(n), tensors
        else:
            good, arrays = _encode(mapping, batch.records())
    needs_values = bool(shape.categorical) or bool(shape.texts)
    return _finish(numeric, batch.records() if needs_values else [{}] * n, shape, good, arrays)


_NONE: tuple[np.ndarray, dict[str, np.ndarray]] = (np.zeros(0, dtype=np.int64), {})


def _finish(
    numeric: np.ndarray,
    values: Sequence[Mapping[str, Any]],
    shape: Layout,
    good: np.ndarray,
    arrays: Mapping[str, Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The tensors' element columns into ``numeric``, the categories and the texts."""
    n = len(values)
    categorical = np.array(
        [[str(v.get(f)) for f in shape.categorical] for v in values], dtype=object
    ).reshape(n, len(shape.categorical))
    texts = np.empty((n, len(shape.texts)), dtype=object)
    texts.fill(())
    if shape.mapping is None or not n:
        return numeric, categorical, texts, 0
    for tensor in shape.tensors:
        if good.size:
            flat = np.asarray(arrays[tensor.name], dtype=np.float64).reshape(good.size, -1)
            numeric[good, tensor.columns] = flat
    pads = {s.name: s.pad for s in shape.specs}
    for column, name in enumerate(shape.texts):
        for row, value in zip(good.tolist(), arrays.get(name, []), strict=True):
            texts[row, column] = text.tokens(value, pad=pads[name])
    return numeric, categorical, texts, n - good.size


def _encode(
    mapping: tensormap.BoundMapping, values: Sequence[Mapping[str, Any]]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the indexes of the records that fit, their tensors); the rest are left out."""
    try:
        return np.arange(len(values)), mapping.encode(values)
    except tensormap.RecordErrors as exc:
        good = [i for i in range(len(values)) if i not in exc.errors]
    except tensormap.MappingError:  # only the whole batch failed (ragged text): one by one
        good = []
        for index, value in enumerate(values):
            try:
                mapping.encode([value])
            except tensormap.MappingError:
                continue
            good.append(index)
    if not good:
        return np.zeros(0, dtype=np.int64), {}
    chosen = [values[i] for i in good]
    try:
        return np.array(good, dtype=np.int64), mapping.encode(chosen)
    except tensormap.MappingError:  # records that fit alone but not together: give up on them
        return np.zeros(0, dtype=np.int64), {}


def _numbers(column: Any) -> np.ndarray:
    """A column as :func:`_number` reads each value: NaN for a null, a boolean, a time or
    anything that is no number."""
    data = np.asarray(np.ma.getdata(column))
    if data.dtype.kind in "iuf" and data.ndim == 1:
        out = data.astype(np.float64)
        if np.ma.isMaskedArray(column):
            out[np.ma.getmaskarray(column)] = np.nan
        return out
    if data.dtype.kind in "bM":
        return np.full(len(data), np.nan)
    return np.array([_number(v) for v in python_values(column, None)], dtype=np.float64)


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def config_problems(
    config: Mapping[str, Any], *, schemas: Mapping[str, Mapping[str, Any]]
) -> list[ConfigProblem]:
    """What ``streamflow verify`` says of ``inputs``: the fields against the ``in`` port,
    and the settings that cannot go with tensor or text inputs."""
    if not config.get("inputs"):
        return []
    mapping = tensormap.TensorMapping(tensormap.parse_inputs(config["inputs"]), {})
    found = tensormap.check_schemas(mapping, input_schema=schemas.get("in"), output_schema=None)
    problems = [ConfigProblem(p.code, p.message, p.param, p.hint, p.path) for p in found]
    for other in ("reference", "detector_url"):
        if config.get(other):
            problems.append(
                ConfigProblem(
                    "invalid-config-value",
                    f"{other} cannot be combined with tensor or text inputs, which take "
                    "their reference from the first reference_size records",
                    other,
                    hint="leave it out, or watch flat features with numeric/categorical",
                )
            )
    return problems
