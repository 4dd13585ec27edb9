"""What a SavedModel may do: its graph is read, and side-effecting ops refuse it, before it loads.

A SavedModel is a program, not data. Its graph can read and write files,
list directories, call back into Python or reach other hosts, and it does so
with the replica's rights as soon as it runs (warm-up runs it at once). So
before TensorFlow loads one, its ``saved_model.pb`` is parsed as a protobuf,
which runs nothing, and every op of every function in it is checked against
:data:`DENIED_OPS`. One denied op anywhere refuses the model.

A graph can also carry another graph as data: ``DatasetFromGraph`` turns a
serialized GraphDef, kept in a constant or a variable, back into a dataset and
runs it (a ``TextLineDataset`` hidden that way read files while this check saw
only bytes). Rather than decode every tensor that might hold a graph, the ops
that run a graph or program kept as data are denied outright
(:data:`EMBEDDED_OPS`): a serving graph has no need for them. Functions passed
by attribute (``MapDataset``'s ``f``, ``XlaCallModule``'s ``function_list``)
are in the library, and checked like any other.

The checkpoint ops (``SaveV2``, ``RestoreV2``, ...) are the one nuance: every
TF2 SavedModel carries a saver whose functions hold them, and
``tf.saved_model.load`` does not run those (it restores variables with its
own reader). They are allowed in the functions only the saver reaches, and
refused in every other function. A function is reached when a node names it
in an attribute or has it as its op (TensorFlow's call by name), or when it is
the gradient of one reached; the saver's own nodes are checked too. A
SavedModel without an object graph (TF1 style) would have its init ops run by
the loader and is refused outright, as is a ``saved_model.pbtxt`` (or
``.cpb``) that the loader might read instead of the ``.pb`` checked here.

Serving SavedModels is off unless a streamlet sets ``allow_saved_model``: the
check is a denylist, and a denylist can only name what is known to be harmful.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["CHECKPOINT_OPS", "DENIED_OPS", "EMBEDDED_OPS", "GraphRefused", "check_saved_model"]


class GraphRefused(Exception):
    """A SavedModel holding an op it may not run, or in a form that cannot be checked."""


_FILES = {
    "ReadFile", "WriteFile", "MatchingFiles", "FileSystemSetConfiguration", "ImmutableConst",
    "DecodeProtoV2", "EncodeProto",  # descriptor_source may name a file
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2",
    "LoadAndRemapMatrix", "GenerateVocabRemapping",
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2",
    "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "TFRecordReader",
    "TFRecordReaderV2", "LMDBReader", "IdentityReader", "IdentityReaderV2",
    "ReaderRead", "ReaderReadV2", "ReaderReadUpTo", "ReaderReadUpToV2",
    "RecordInput", "Skipgram", "FixedUnigramCandidateSampler",  # file_pattern, a corpus, vocab
    "DumpTensor", "CalibrationStatisticsSaver",  # quantization's calibration files
}  # fmt: skip
_DATASETS = {
    "TextLineDataset", "TFRecordDataset", "TFRecordDatasetV2", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset",
    "LMDBDataset", "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset",
    "MatchingFilesDataset", "ExperimentalMatchingFilesDataset", "SaveDataset",
    "SaveDatasetV2", "LoadDataset", "ExperimentalLoadDataset", "SnapshotDataset",
    "SnapshotDatasetV2", "SnapshotDatasetReader", "SnapshotNestedDatasetReader",
    "SnapshotChunkDataset", "ListSnapshotChunksDataset",
    "ExperimentalSnapshotDataset", "CacheDataset", "CacheDatasetV2", "DatasetToTFRecord",
    "ExperimentalDatasetToTFRecord", "DistributedSave", "DataServiceDataset",
    "DataServiceDatasetV2", "DataServiceDatasetV3", "DataServiceDatasetV4", "RegisterDataset",
    "RegisterDatasetV2",
}  # fmt: skip
_OUTPUT = {
    "Print", "PrintV2",  # output_stream may be file://
    "CreateSummaryFileWriter", "CreateSummaryDbWriter", "SummaryWriter", "WriteSummary",
    "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary",
    "WriteGraphSummary", "WriteRawProtoSummary", "ImportEvent", "FlushSummaryWriter",
    "CloseSummaryWriter", "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3",
    "DebugNanCount", "DebugNumericSummary", "DebugNumericSummaryV2",
}  # fmt: skip
_PYTHON = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
_NETWORK = {
    "Rpc", "TryRpc", "RpcClient", "RpcServer", "RpcServerStart", "RpcServerRegister", "RpcCall",
    "RpcCheckStatus", "RpcGetValue", "Send", "Recv", "_Send", "_Recv", "_HostSend", "_HostRecv",
    "RemoteCall", "CollectiveReduce", "CollectiveGather", "CollectiveBcastSend",
    "CollectiveBcastRecv", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGatherV2",
    "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2",
    "CollectiveAllToAllV3", "CollectiveReduceScatterV2", "CollectiveInitializeCommunicator",
    "CollectiveAssignGroupV2",
}  # fmt: skip

#: Ops that run a graph or a program kept as data (a tensor or a string attribute), which
#: this check cannot read: a dataset's GraphDef, an iterator's saved state (which rebuilds
#: its datasets), an MLIR module.
EMBEDDED_OPS = frozenset(
    {
        "DatasetFromGraph",
        "DeserializeIterator",
        "MlirPassthroughOp",
        "_TPUCompileMlir",
        "_XlaHostComputeMlir",
    }
)

#: Ops that write or read checkpoint files: allowed only in the saver's own functions.
CHECKPOINT_OPS = frozenset(
    {
        "Save",
        "SaveV2",
        "SaveSlices",
        "Restore",
        "RestoreV2",
        "RestoreSlice",
        "MergeV2Checkpoints",
        "DTensorRestoreV2",
    }
)

#: Ops refused anywhere a model's functions can reach: file and I/O, dataset sources and
#: sinks, printing and summaries, Python callbacks, RPC and cross-device sends, and the ops
#: that run a graph kept as data.
DENIED_OPS = frozenset(
    _FILES | _DATASETS | _OUTPUT | _PYTHON | _NETWORK | EMBEDDED_OPS | CHECKPOINT_OPS
)


def check_saved_model(directory: Path) -> None:
    """Raise GraphRefused unless every op the SavedModel in ``directory`` holds is allowed."""
    for other in ("saved_model.pbtxt", "saved_model.cpb"):
        if (directory / other).exists():
            raise GraphRefused(f"the SavedModel has a {other}: only saved_model.pb is accepted")
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString((directory / "saved_model.pb").read_bytes())
    except Exception as exc:  # protobuf's DecodeError, or an unreadable file
        what = type(exc).__name__
        raise GraphRefused(f"not a readable SavedModel (saved_model.pb): {what}") from None
    if not saved.meta_graphs:
        raise GraphRefused("the SavedModel has no graph")
    for meta_graph in saved.meta_graphs:
        _check_meta_graph(meta_graph)


def _check_meta_graph(meta_graph: Any) -> None:
    if not meta_graph.object_graph_def.nodes:
        raise GraphRefused(
            "a TF1-style SavedModel (no object graph) runs init ops as it loads: "
            "export it with tf.saved_model.save"
        )
    graph = meta_graph.graph_def
    library = {f.signature.name: f for f in graph.library.function}
    calls = _call_graph(graph.library, library)
    saver = meta_graph.saver_def
    saver_names = {
        name.split(":")[0] for name in (saver.save_tensor_name, saver.restore_op_name) if name
    }
    saver_nodes = [n for n in graph.node if n.name in saver_names]
    top = [n for n in graph.node if n.name not in saver_names]
    saver_reach = _closure(calls, _called(saver_nodes, library))
    # Strict is decided by what else reaches a function, never by the saver reaching it too:
    # a function any other node, function or object calls may not keep its checkpoint ops.
    roots = set(_called(top, library)) | set(meta_graph.object_graph_def.concrete_functions)
    roots |= set(library) - saver_reach  # every other function, reachable or not
    strict = _closure(calls, roots)
    for node in top:
        _refuse(node, DENIED_OPS, "the graph")
    for node in saver_nodes:
        _refuse(node, DENIED_OPS - CHECKPOINT_OPS, "the saver")
    for name, function in library.items():
        denied = DENIED_OPS if name in strict else DENIED_OPS - CHECKPOINT_OPS
        for node in function.node_def:
            _refuse(node, denied, f"function {name}")


def _refuse(node: Any, denied: frozenset[str], where: str) -> None:
    if node.op not in denied:
        return
    if node.op in EMBEDDED_OPS:
        why = "it runs a graph serialized inside the model, which cannot be checked"
    else:
        why = "a served model may not touch files, call Python or reach other hosts"
    raise GraphRefused(f"refused op {node.op} in {where}: {why} (see SECURITY.md, the denied ops)")


def _called(nodes: Iterable[Any], library: dict[str, Any]) -> Iterator[str]:
    """The functions that nodes call: by op name, or through an attribute (f, body, ...)."""
    for node in nodes:
        if node.op in library:  # TensorFlow resolves an op named like a function to a call
            yield node.op
        for value in node.attr.values():
            yield from _attr_functions(value)


def _attr_functions(value: Any) -> Iterator[str]:
    """The functions an attribute names, with those its functions' own attributes name."""
    if value.HasField("func"):
        yield from _named(value.func)
    if value.HasField("list"):
        for func in value.list.func:
            yield from _named(func)


def _named(func: Any) -> Iterator[str]:
    yield func.name
    for value in func.attr.values():
        yield from _attr_functions(value)


def _call_graph(function_library: Any, library: dict[str, Any]) -> dict[str, set[str]]:
    """Each function's callees: its nodes' calls, its own attributes' and its gradient."""
    calls = {
        name: set(_called(f.node_def, library))
        | {c for v in f.attr.values() for c in _attr_functions(v)}
        for name, f in library.items()
    }
    for gradient in function_library.gradient:
        if gradient.function_name in calls:
            calls[gradient.function_name].add(gradient.gradient_func)
    return calls


def _closure(calls: dict[str, set[str]], roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in calls]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(c for c in calls[name] if c in calls and c not in seen)
    return seen
