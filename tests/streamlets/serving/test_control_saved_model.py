"""A pushed SavedModel is a program: refused unless allowed, and then only without side effects.

TensorFlow graphs can read and write files, list directories and call Python.
A SavedModel that does so during warm-up runs with the replica's rights the
moment it is loaded, so (issue 10, finding 6) SavedModel loading is off unless
a streamlet turns it on, and even then a graph holding a denied op is refused
before TensorFlow loads it. Each model here is built for real with TensorFlow
and would leave a file behind if any of it ran.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from streamflow.models import graph_guard
from streamflow.models.artifacts import pack_directory
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s


def _hostile_saved_model(path: Path, marker: Path, how: str) -> Path:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def side_effect() -> Any:
        if how == "read-write-file":
            return tf.io.write_file(str(marker), tf.io.read_file("/etc/hostname"))
        if how == "matching-files":
            found = tf.strings.reduce_join(tf.io.matching_files("/etc/*"), separator="\n")
            return tf.io.write_file(str(marker), found)
        return tf.py_function(lambda: marker.write_text("ran") and 0.0, [], tf.float32)

    class Sneaky(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 13], tf.float32)])
        def serve(self, x: Any) -> Any:
            with tf.control_dependencies([side_effect()]):
                return {"probabilities": tf.nn.softmax(x[:, :3])}

    module = Sneaky()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.mark.parametrize("how", ["read-write-file", "matching-files", "py-function"])
@pytest.mark.parametrize("allow", [False, True], ids=["default", "allow_saved_model"])
def test_a_saved_model_with_file_or_python_ops_is_refused_before_it_runs(
    tmp_path: Path, how: str, allow: bool
) -> None:
    marker = tmp_path / "written-by-the-model"
    model = _hostile_saved_model(tmp_path / "sneaky", marker, how)
    config = {"allow_saved_model": True} if allow else {}
    h = s.harness(tmp_path, **config)
    out = h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=pack_directory(model)))
    first = out[0].value
    status = first if first["state"] != "loading" else s.settle(h, 1)
    assert not marker.exists(), "the SavedModel ran"
    if allow:
        assert status["state"] == "failed", status
        assert "refused op" in status["message"], status["message"]
    else:
        assert status["state"] == "rejected", status
        assert "allow_saved_model" in status["message"], status["message"]


def test_an_ordinary_saved_model_still_loads_when_allowed(
    tmp_path: Path, wine_models: WineModels
) -> None:
    h = s.harness(tmp_path, allow_saved_model=True)
    archive = pack_directory(wine_models.v2.saved_model)
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=archive))
    status = s.settle(h, 1)
    assert status["state"] == "serving", status


# The checkpoint ops are allowed only in the functions the saver alone reaches, so the
# guard must see every way a function is reached. These models are edited at the protobuf
# level, the way an attacker would, from a real SavedModel with a variable (and a saver).


@pytest.fixture(scope="module")
def plain_saved_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    class Scale(tf.Module):
        def __init__(self) -> None:
            self.factor = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: Any) -> Any:
            return {"y": x * self.factor}

    path = tmp_path_factory.mktemp("plain")
    module = Scale()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return (path / "saved_model.pb").read_bytes()


def _edited(plain: bytes, directory: Path, edit: Any) -> Path:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(plain)
    edit(saved.meta_graphs[0])
    directory.mkdir()
    (directory / "saved_model.pb").write_bytes(saved.SerializeToString())
    return directory


def _smuggle_through_saver(meta_graph: Any, *, op: str = "SaveV2") -> str:
    """Adds a function holding ``op`` that the saver's restore node names; returns its name."""
    function = meta_graph.graph_def.library.function.add()
    function.signature.name = "smuggled"
    function.node_def.add(name="write", op=op)
    restore = meta_graph.saver_def.restore_op_name.split(":")[0]
    node = next(n for n in meta_graph.graph_def.node if n.name == restore)
    node.attr["smuggled"].func.name = "smuggled"
    return "smuggled"


def _serving_function(meta_graph: Any) -> Any:
    library = meta_graph.graph_def.library.function
    return next(f for f in library if f.signature.name.startswith("__inference_serve"))


def test_the_plain_saved_model_passes_the_guard(tmp_path: Path, plain_saved_model: bytes) -> None:
    graph_guard.check_saved_model(_edited(plain_saved_model, tmp_path / "m", lambda _: None))


@pytest.mark.parametrize("caller", ["serving-function", "graph"])
@pytest.mark.parametrize("op", ["SaveV2", "MergeV2Checkpoints"])
def test_a_saver_function_called_by_op_name_from_serving_code_is_refused(
    tmp_path: Path, plain_saved_model: bytes, caller: str, op: str
) -> None:
    # In TensorFlow a node whose op is a library function's name calls that function.
    def edit(meta_graph: Any) -> None:
        name = _smuggle_through_saver(meta_graph, op=op)
        if caller == "serving-function":
            _serving_function(meta_graph).node_def.add(name="call", op=name)
        else:
            meta_graph.graph_def.node.add(name="call", op=name)

    with pytest.raises(graph_guard.GraphRefused, match=f"refused op {op} in function smuggled"):
        graph_guard.check_saved_model(_edited(plain_saved_model, tmp_path / "m", edit))


def test_a_saver_function_called_through_a_nested_function_attr_is_refused(
    tmp_path: Path, plain_saved_model: bytes
) -> None:
    # A function attribute may itself carry function attributes (a NameAttrList's attr map).
    def edit(meta_graph: Any) -> None:
        name = _smuggle_through_saver(meta_graph)
        call = _serving_function(meta_graph).node_def.add(name="call", op="PartitionedCall")
        call.attr["f"].func.name = "__inference_serve_wrapper_absent"
        call.attr["f"].func.attr["inner"].func.name = name

    with pytest.raises(graph_guard.GraphRefused, match="refused op SaveV2 in function smuggled"):
        graph_guard.check_saved_model(_edited(plain_saved_model, tmp_path / "m", edit))


def test_a_saver_node_holding_a_denied_op_is_refused(
    tmp_path: Path, plain_saved_model: bytes
) -> None:
    def edit(meta_graph: Any) -> None:
        restore = meta_graph.saver_def.restore_op_name.split(":")[0]
        node = next(n for n in meta_graph.graph_def.node if n.name == restore)
        node.op = "WriteFile"

    with pytest.raises(graph_guard.GraphRefused, match="refused op WriteFile in the saver"):
        graph_guard.check_saved_model(_edited(plain_saved_model, tmp_path / "m", edit))


# A graph can carry another graph as data: DatasetFromGraph turns a serialized GraphDef
# (in a variable or a constant) back into a dataset and runs it, so a TextLineDataset
# hidden there read /etc/hostname and came back as predictions while the check, reading
# only the outer graph, saw bytes (security review, finding 1). The ops that run a graph
# or program kept as data are refused outright: a serving graph has no need for them.


def _dataset_from_graph_saved_model(path: Path, secret: Path, *, hidden_in: str) -> Path:
    """The attack: a TextLineDataset over ``secret`` kept as a serialized GraphDef, which
    the serving function deserializes (DatasetFromGraph) and returns as an output."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    reader = tf.data.TextLineDataset(str(secret))
    graph_def = tf.raw_ops.DatasetToGraphV2(input_dataset=reader._variant_tensor).numpy()

    class Leaky(tf.Module):
        def __init__(self) -> None:
            self.blob = tf.Variable(graph_def) if hidden_in == "variable" else None

        @tf.function(input_signature=[tf.TensorSpec([None, 13], tf.float32)])
        def serve(self, x: Any) -> Any:
            if self.blob is not None:
                blob = self.blob
            else:  # joined with nothing from the input, so that it is not folded at load
                nothing = tf.strings.substr(tf.strings.as_string(tf.shape(x)[0]), 0, 0)
                blob = tf.strings.join([tf.constant(graph_def), nothing])
            variant = tf.raw_ops.DatasetFromGraph(graph_def=blob)
            lines = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
            leaked = lines.reduce(tf.constant(""), lambda text, line: text + line)
            codes = tf.cast(tf.io.decode_raw(leaked, tf.uint8), tf.float32)  # the file's bytes
            return {"probabilities": tf.tile(codes[None, :], [tf.shape(x)[0], 1])}

    module = Leaky()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.mark.parametrize("hidden_in", ["variable", "constant"])
def test_a_dataset_graph_hidden_in_a_tensor_is_refused_naming_the_op(
    tmp_path: Path, hidden_in: str
) -> None:
    import tensorflow as tf

    secret = tmp_path / "hostname"
    secret.write_text("the-replicas-secret\n")
    model = _dataset_from_graph_saved_model(tmp_path / "leaky", secret, hidden_in=hidden_in)
    # loaded without the check, the model is the attack: it answers with the file
    serve = tf.saved_model.load(str(model)).signatures["serving_default"]
    predictions = serve(x=tf.zeros([1, 13]))["probabilities"].numpy()
    assert bytes(predictions[0].astype("uint8")) == b"the-replicas-secret"

    h = s.harness(tmp_path, allow_saved_model=True)
    h.control("model", s.descriptor(1, "TF_SAVED_MODEL", data=pack_directory(model)))
    status = s.settle(h, 1)
    assert status["state"] == "failed", status
    assert "refused op DatasetFromGraph" in status["message"], status["message"]
    assert "serialized" in status["message"], status["message"]  # why, in the user's terms


@pytest.mark.parametrize(
    "op",
    [
        # run a graph or program kept as data, which the check cannot read
        "DatasetFromGraph",
        "DeserializeIterator",
        "MlirPassthroughOp",
        # read or write files
        "ListSnapshotChunksDataset",
        "SnapshotChunkDataset",
        "RecordInput",
        "Skipgram",
        "FixedUnigramCandidateSampler",
        "DumpTensor",
        "CalibrationStatisticsSaver",
        "DTensorRestoreV2",
    ],
)
def test_ops_that_run_hidden_graphs_or_touch_files_are_refused_in_serving_code(
    tmp_path: Path, plain_saved_model: bytes, op: str
) -> None:
    def edit(meta_graph: Any) -> None:
        _serving_function(meta_graph).node_def.add(name="hidden", op=op)

    with pytest.raises(graph_guard.GraphRefused, match=f"refused op {op} in function __inference"):
        graph_guard.check_saved_model(_edited(plain_saved_model, tmp_path / "m", edit))


# An argument that names a file, a path or a directory, or that holds a graph or a
# program, marks an op that reaches past the model. Checked against the TensorFlow
# installed, so an upgrade that adds such an op fails here until it is judged.
_REACHING = re.compile(r"file|path|(^|_)dir(ectory)?$|logdir|prefix|graph_def|mlir_module")
_REVIEWED = {
    "TensorSliceDataset": "is_files only marks the elements as file names for tf.data",
    "SetStatsAggregatorDataset": "counter_prefix names statistics counters",
    "ExperimentalSetStatsAggregatorDataset": "counter_prefix names statistics counters",
    "CTCBeamSearchDecoder": "top_paths is a count",
}


def test_every_tensorflow_op_with_a_file_path_or_graph_argument_is_denied() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: F401  (registers the ops)
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    reaching = {
        op.name: names
        for op in ops.op
        if (names := [a.name for a in (*op.input_arg, *op.attr) if _REACHING.search(a.name)])
    }
    assert "ReadFile" in reaching and "DatasetFromGraph" in reaching  # the pattern still sees
    open_ops = {
        name: names
        for name, names in reaching.items()
        if name not in graph_guard.DENIED_OPS and name not in _REVIEWED
    }
    assert open_ops == {}, "ops that may reach past the model, neither denied nor reviewed"
