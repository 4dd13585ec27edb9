"""Integrated gradients over a model's named inputs, whatever their per-record shapes.

A model may take an image ``[8, 8, 1]``, a feature vector ``[13]`` and a
string at once. Integrated gradients move every *float* input together along
the straight path from its baseline to the record's value, and hold every
other input (text, integer ids) at the record's own value, both on the path
and at the baseline: a gradient has no meaning for a token, so those inputs
get no attribution, and the baseline output ``f(b)`` is the model's output
with only the float inputs at their baselines. Completeness then holds over
the float inputs together: all their attributions sum to ``f(x) - f(b)``, up
to the quadrature error of the trapezoid rule over ``steps`` intervals.

The model is any differentiable ``call(named tensors) -> named tensors``
(a predictor's ``gradients.call``): all records and all path steps of a chunk go
through one ``tf.GradientTape`` pass. A chunk is bounded by the number of
input elements on the path, not by records, so an explainer of large images
takes fewer records per pass rather than more memory.

TensorFlow is imported when first used, so the explanation streamlet imports
without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streamflow.models.predictor import NamedCall

__all__ = [
    "NamedCall",
    "NotDifferentiable",
    "TensorAttributions",
    "element_names",
    "integrated_gradients",
    "no_gradient",
    "pick_output",
]

_MAX_PATH_ELEMENTS = 1 << 23  # input elements on the path per gradient pass: bounds the tape


class NotDifferentiable(Exception):
    """The model's output has no gradient with respect to an input."""


@dataclasses.dataclass(frozen=True)
class TensorAttributions:
    values: dict[str, np.ndarray]  # per explained input: (n, *per-record shape)
    baseline_output: np.ndarray  # (n,): the target output with the float inputs at baseline


def element_names(name: str, shape: Sequence[int]) -> list[str]:
    """Row-major names of a tensor's elements: ``image[0,0,0]``, ...; a scalar is its name."""
    if not shape:
        return [name]
    return [f"{name}[{','.join(map(str, index))}]" for index in np.ndindex(*shape)]


def pick_output(outputs: Mapping[str, Any], name: str) -> Any:
    """Output ``name``, or the only output when ``name`` is empty."""
    if name in outputs:
        return outputs[name]
    if not name and len(outputs) == 1:
        return next(iter(outputs.values()))
    raise KeyError(
        f"the model returned outputs {', '.join(sorted(outputs))}; "
        f"{'not ' + repr(name) if name else 'set explained_output to one of them'}"
    )


def no_gradient(
    call: NamedCall, zeros: Mapping[str, np.ndarray], *, explained: Sequence[str], output: str
) -> str:
    """ "" if the output has a gradient with respect to every explained input; else why not."""
    import tensorflow as tf

    tensors = {name: tf.constant(value) for name, value in zeros.items()}
    with tf.GradientTape() as tape:
        for name in explained:
            tape.watch(tensors[name])
        result = pick_output(call(tensors), output)
        first = tf.reshape(result, (tf.shape(result)[0], -1))[:, 0]
    gradients = tape.gradient(first, [tensors[name] for name in explained])
    missing = [name for name, g in zip(explained, gradients, strict=True) if g is None]
    if missing:
        which = ", ".join(f"input {m!r}" if m else "its input" for m in missing)
        return f"its output has no gradient with respect to {which} (a non-differentiable op)"
    return ""


def integrated_gradients(
    call: NamedCall,
    inputs: Mapping[str, np.ndarray],
    *,
    explained: Sequence[str],
    baselines: Mapping[str, np.ndarray],
    output: str,
    targets: np.ndarray,
    steps: int,
) -> TensorAttributions:
    """Attributions of each record's ``targets`` element of ``output`` to its float inputs.

    ``inputs`` holds every model input for ``n`` records (batch first); ``explained``
    names the float ones, each with a per-record ``baselines`` array. The rest are
    held at the records' values.
    """
    rows = len(targets)
    per_record = sum(int(np.prod(inputs[name].shape[1:], dtype=np.int64)) for name in explained)
    per_pass = max(1, _MAX_PATH_ELEMENTS // ((steps + 1) * max(per_record, 1)))
    values: dict[str, list[np.ndarray]] = {name: [] for name in explained}
    at_baseline = []
    for start in range(0, rows, per_pass):
        chunk = slice(start, start + per_pass)
        part, base = _chunk(
            call,
            {name: array[chunk] for name, array in inputs.items()},
            explained,
            baselines,
            output,
            targets[chunk],
            steps,
        )
        for name in explained:
            values[name].append(part[name])
        at_baseline.append(base)
    return TensorAttributions(
        {name: np.concatenate(parts) for name, parts in values.items()},
        np.concatenate(at_baseline),
    )


def _chunk(
    call: NamedCall,
    inputs: Mapping[str, np.ndarray],
    explained: Sequence[str],
    baselines: Mapping[str, np.ndarray],
    output: str,
    targets: np.ndarray,
    steps: int,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    import tensorflow as tf

    n = len(targets)
    points = steps + 1
    alphas = np.linspace(0.0, 1.0, points)
    weights = np.full(points, 1.0 / steps)
    weights[[0, -1]] /= 2  # the trapezoid rule
    deltas, tensors = {}, {}
    for name, array in inputs.items():
        if name in explained:
            x = np.asarray(array)
            baseline = np.broadcast_to(np.asarray(baselines[name], dtype=x.dtype), x.shape[1:])
            deltas[name] = (x - baseline[None]).astype(np.float64)
            along = alphas.astype(x.dtype).reshape(points, *([1] * x.ndim))
            path = baseline[None, None] + along * (x - baseline[None])[None]
            tensors[name] = tf.constant(path.reshape(points * n, *x.shape[1:]))
        else:  # held at the record's value at every step of the path
            tensors[name] = tf.constant(np.concatenate([array] * points))
    chosen = tf.constant(np.tile(targets, points).astype(np.int32))
    with tf.GradientTape() as tape:
        for name in explained:
            tape.watch(tensors[name])
        result = pick_output(call(tensors), output)
        flat = tf.reshape(result, (points * n, -1))
        picked = tf.gather(flat, chosen, axis=1, batch_dims=1)
    gradients = tape.gradient(picked, [tensors[name] for name in explained])
    out = {}
    for name, gradient in zip(explained, gradients, strict=True):
        if gradient is None:
            raise NotDifferentiable(
                f"the model's output has no gradient with respect to input {name!r}"
            )
        grid = np.asarray(gradient).astype(np.float64).reshape(points, n, *deltas[name].shape[1:])
        out[name] = deltas[name] * np.tensordot(weights, grid, axes=1)
    base = np.asarray(picked).astype(np.float64).reshape(points, n)[0]
    return out, base
