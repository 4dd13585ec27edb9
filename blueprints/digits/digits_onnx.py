"""The digits CNN as an ONNX graph, built node by node from its Keras weights.

Why by hand: no Keras-to-ONNX converter supports this TensorFlow and Keras, and
the model is five plain layers, so a direct translation is short and easy to
check. It uses only the default ONNX domain, so any ONNX runtime can run it.

The one subtlety is layout. Keras images are NHWC; ONNX `Conv` and `MaxPool`
are NCHW. The graph transposes the input to NCHW before the first convolution
and back to NHWC before `Flatten`, so the flattened vector is in Keras's
(row, column, channel) order, the order the `Dense` kernel was trained on.
Anything this translation does not know raises, rather than guessing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["OPSET", "keras_to_onnx", "max_difference"]

OPSET = 17
_ACTIVATIONS = {"linear": None, "relu": "Relu", "softmax": "Softmax"}
_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]


class _Graph:
    """Nodes and weights under construction; each node's output gets a fresh name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []

    def node(self, op: str, inputs: list[str], *, output: str = "", **attrs: Any) -> str:
        output = output or f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def weight(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def activation(self, layer: Any, current: str) -> str:
        name = getattr(layer.activation, "__name__", str(layer.activation))
        if name not in _ACTIVATIONS:
            raise ValueError(f"layer {layer.name!r}: activation {name!r} has no ONNX translation")
        op = _ACTIVATIONS[name]
        return self.node(op, [current]) if op else current


def _same_pads(kernel: tuple[int, int], dilation: tuple[int, int]) -> list[int]:
    """Keras's `same` padding at stride 1: the odd pixel, if any, goes at the end."""
    totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    begins = [t // 2 for t in totals]
    return begins + [t - b for t, b in zip(totals, begins, strict=True)]


def _conv(graph: _Graph, layer: Any, current: str) -> str:
    kernel, bias = layer.get_weights()  # kernel: [kh, kw, in, out]
    size = tuple(int(k) for k in kernel.shape[:2])
    strides = [int(s) for s in layer.strides]
    dilations = [int(d) for d in layer.dilation_rate]
    if layer.padding == "same":
        if strides != [1, 1]:
            raise ValueError(f"layer {layer.name!r}: only stride 1 is translated with 'same'")
        pads = _same_pads(size, (dilations[0], dilations[1]))
    else:
        pads = [0, 0, 0, 0]
    current = graph.node(
        "Conv",
        [
            current,
            graph.weight(f"{layer.name}_w", kernel.transpose(3, 2, 0, 1)),  # [out, in, kh, kw]
            graph.weight(f"{layer.name}_b", bias),
        ],
        kernel_shape=list(size),
        strides=strides,
        dilations=dilations,
        pads=pads,
    )
    return graph.activation(layer, current)


def _max_pool(graph: _Graph, layer: Any, current: str) -> str:
    if layer.padding != "valid":
        raise ValueError(f"layer {layer.name!r}: only 'valid' pooling is translated")
    return graph.node(
        "MaxPool",
        [current],
        kernel_shape=[int(p) for p in layer.pool_size],
        strides=[int(s) for s in layer.strides],
    )


def _dense(graph: _Graph, layer: Any, current: str) -> str:
    kernel, bias = layer.get_weights()  # kernel: [in, out], which Gemm takes as B
    current = graph.node(
        "Gemm",
        [current, graph.weight(f"{layer.name}_w", kernel), graph.weight(f"{layer.name}_b", bias)],
    )
    return graph.activation(layer, current)


def keras_to_onnx(model: Any, *, input_name: str, output_name: str) -> onnx.ModelProto:
    """The ONNX model of a chain of Conv2D, MaxPooling2D, Flatten and Dense layers."""
    graph = _Graph()
    current, channels_first = input_name, False
    for layer in model.layers:
        kind = type(layer).__name__
        if getattr(layer, "data_format", "channels_last") != "channels_last":
            raise ValueError(f"layer {layer.name!r}: only channels_last layers are translated")
        if kind == "InputLayer":
            continue
        if kind in ("Conv2D", "MaxPooling2D") and not channels_first:
            current, channels_first = graph.node("Transpose", [current], perm=_TO_NCHW), True
        if kind in ("Flatten", "Dense") and channels_first:
            current, channels_first = graph.node("Transpose", [current], perm=_TO_NHWC), False
        if kind == "Conv2D":
            current = _conv(graph, layer, current)
        elif kind == "MaxPooling2D":
            current = _max_pool(graph, layer, current)
        elif kind == "Flatten":
            current = graph.node("Flatten", [current], axis=1)
        elif kind == "Dense":
            current = _dense(graph, layer, current)
        else:
            raise ValueError(f"layer {layer.name!r} ({kind}) has no ONNX translation")
    graph.node("Identity", [current], output=output_name)
    inputs = [
        helper.make_tensor_value_info(
            input_name, TensorProto.FLOAT, ["N", *(int(d) for d in model.inputs[0].shape[1:])]
        )
    ]
    outputs = [
        helper.make_tensor_value_info(
            output_name, TensorProto.FLOAT, ["N", int(model.outputs[0].shape[-1])]
        )
    ]
    onnx_graph = helper.make_graph(
        graph.nodes, model.name, inputs, outputs, initializer=graph.weights
    )
    proto = helper.make_model(
        onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="streamflow"
    )
    proto.ir_version = 8  # what opset 17 needs, so older runtimes load it too
    onnx.checker.check_model(proto, full_check=True)
    return proto


def max_difference(model: Any, proto: onnx.ModelProto, x: np.ndarray, *, input_name: str) -> float:
    """The largest absolute difference between Keras's and ONNX Runtime's outputs on `x`."""
    import onnxruntime

    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (theirs,) = session.run(None, {input_name: x.astype(np.float32)})
    ours = np.asarray(model.predict(x, verbose=0, batch_size=256))
    return float(np.max(np.abs(ours - theirs)))
