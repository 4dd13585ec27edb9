"""The application as a graph: streamlets and topics as nodes, ports as edges.

The graph is built once from a verified Application (so every port is known
to exist and every schema name is the one the port declares) and then
rendered: as plain text for a terminal, as Mermaid for Markdown, and as DOT
for Graphviz. Edges run producer -> topic -> consumer, each labelled with its
port and schema; a producer and a consumer of one topic may use different
(compatible) schemas, which is why the schema sits on the edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamflow.api.ports import PortKind
from streamflow.blueprint.model import Application
from streamflow.schema.formats import DEFAULT_FORMAT

__all__ = [
    "FORMATS",
    "Edge",
    "Graph",
    "StreamletNode",
    "TopicNode",
    "build_graph",
    "render",
    "to_dot",
    "to_mermaid",
    "to_text",
]


@dataclass(frozen=True)
class StreamletNode:
    name: str
    class_path: str
    shape: str
    replicas: int


@dataclass(frozen=True)
class TopicNode:
    name: str
    partitions: int
    replication: int
    managed: bool
    compacted: bool
    format: str = str(DEFAULT_FORMAT)

    def summary(self) -> str:
        parts = [_plural(self.partitions, "partition"), f"replication {self.replication}"]
        if self.format != DEFAULT_FORMAT:
            parts.append(self.format)
        if self.compacted:
            parts.append("compacted")
        if not self.managed:
            parts.append("external")
        return ", ".join(parts)


@dataclass(frozen=True)
class Edge:
    """A port on a topic: ``produce`` runs streamlet -> topic, ``consume`` topic -> streamlet."""

    streamlet: str
    port: str
    topic: str
    schema: str
    direction: str  # "produce" or "consume"
    control: bool = False
    format: str = str(DEFAULT_FORMAT)

    @property
    def label(self) -> str:
        """The schema, and the wire format when it is not the default single-object Avro."""
        return self.schema if self.format == DEFAULT_FORMAT else f"{self.schema} as {self.format}"


@dataclass(frozen=True)
class Graph:
    app: str
    streamlets: tuple[StreamletNode, ...]
    topics: tuple[TopicNode, ...]
    edges: tuple[Edge, ...]

    def edges_of(self, topic: str, direction: str) -> list[Edge]:
        return [e for e in self.edges if e.topic == topic and e.direction == direction]


FORMATS = ("text", "mermaid", "dot")


def render(app: Application, *, fmt: str = "text") -> str:
    """The application's graph as ``text``, ``mermaid`` or ``dot``."""
    renderers = {"text": to_text, "mermaid": to_mermaid, "dot": to_dot}
    if fmt not in renderers:
        raise ValueError(f"unknown graph format {fmt!r}; use one of {', '.join(FORMATS)}")
    return renderers[fmt](build_graph(app))


def build_graph(app: Application) -> Graph:
    """The graph of a verified application (its descriptors must load)."""
    streamlets = []
    for name, spec in app.streamlets.items():
        descriptor = app.descriptor(name)
        streamlets.append(
            StreamletNode(name, spec.class_path, descriptor.shape.value, spec.replicas)
        )
    topics, edges = [], []
    for name, topic in app.topics.items():
        topics.append(
            TopicNode(
                name,
                topic.partitions,
                topic.replication,
                topic.managed,
                topic.compacted,
                str(topic.format),
            )
        )
        for ref, direction in [(p, "produce") for p in topic.producers] + [
            (c, "consume") for c in topic.consumers
        ]:
            port = app.descriptor(ref.streamlet).port(ref.port)
            schema = port.schema if port is not None else "?"
            control = port is not None and port.kind == PortKind.CONTROL_INLET
            edges.append(
                Edge(ref.streamlet, ref.port, name, schema, direction, control, str(topic.format))
            )
    return Graph(app.name, tuple(streamlets), tuple(topics), tuple(edges))


# -- text ------------------------------------------------------------------


def to_text(graph: Graph) -> str:
    """A terminal view: the streamlets, the topics, and each flow through a topic."""
    lines = [
        f"{graph.app}: {_plural(len(graph.streamlets), 'streamlet')}, "
        f"{_plural(len(graph.topics), 'topic')}",
        "",
        "Streamlets",
    ]
    name_width = max((len(s.name) for s in graph.streamlets), default=0)
    shape_width = max((len(s.shape) for s in graph.streamlets), default=0)
    replica_width = max((len(_plural(s.replicas, "replica")) for s in graph.streamlets), default=0)
    for s in graph.streamlets:
        lines.append(
            f"  {s.name:<{name_width}}  {s.shape:<{shape_width}}  "
            f"{_plural(s.replicas, 'replica'):<{replica_width}}  {s.class_path}"
        )
    lines += ["", "Topics"]
    topic_width = max((len(t.name) for t in graph.topics), default=0)
    lines += [f"  {t.name:<{topic_width}}  {t.summary()}" for t in graph.topics]
    lines += ["", "Flows"]
    for topic in graph.topics:
        lines += [f"  {flow}" for flow in _flows(graph, topic.name)]
    return "\n".join(lines) + "\n"


def _flows(graph: Graph, topic: str) -> list[str]:
    producers = [
        f"{e.streamlet}.{e.port} ─[{e.label}]─▶ " for e in graph.edges_of(topic, "produce")
    ]
    consumers = [
        f" ─[{e.label}]─▶ {e.streamlet}.{e.port}" + (" (control)" if e.control else "")
        for e in graph.edges_of(topic, "consume")
    ]
    return [f"{p}{topic}{c}" for p in producers or ["(outside) ──▶ "] for c in consumers or [""]]


# -- mermaid ---------------------------------------------------------------


def to_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart: rounded streamlets, cylinder topics, labelled edges."""
    ids = _Ids()
    lines = ["flowchart LR"]
    for s in graph.streamlets:
        label = f"{s.name}<br/>{s.shape}, {_plural(s.replicas, 'replica')}"
        lines.append(f'    {ids.streamlet(s.name)}("{_mermaid_text(label)}")')
    for t in graph.topics:
        label = f"{t.name}<br/>{t.summary()}"
        lines.append(f'    {ids.topic(t.name)}[("{_mermaid_text(label)}")]')
    for e in graph.edges:
        arrow = "-.->" if e.control else "-->"
        label = _mermaid_text(f"{e.port}: {e.label}")
        source, target = ids.streamlet(e.streamlet), ids.topic(e.topic)
        if e.direction == "consume":
            source, target = target, source
        lines.append(f'    {source} {arrow}|"{label}"| {target}')
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


class _Ids:
    """Mermaid node ids: readable, unique, and safe for names with dots or dashes."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, str], str] = {}

    def streamlet(self, name: str) -> str:
        return self._id("s", name)

    def topic(self, name: str) -> str:
        return self._id("t", name)

    def _id(self, prefix: str, name: str) -> str:
        key = (prefix, name)
        if key not in self._ids:
            base = f"{prefix}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
            taken = set(self._ids.values())
            candidate, n = base, 2
            while candidate in taken:
                candidate, n = f"{base}_{n}", n + 1
            self._ids[key] = candidate
        return self._ids[key]


# -- dot -------------------------------------------------------------------


def to_dot(graph: Graph) -> str:
    """A Graphviz digraph: boxes for streamlets, cylinders for topics."""
    lines = [
        f"digraph {_dot_quote(graph.app)} {{",
        "    rankdir=LR;",
        '    node [fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    for s in graph.streamlets:
        label = f"{s.name}\n{s.shape}, {_plural(s.replicas, 'replica')}\n{s.class_path}"
        lines.append(
            f"    {_dot_quote('streamlet:' + s.name)} "
            f"[shape=box, style=rounded, label={_dot_quote(label)}];"
        )
    for t in graph.topics:
        label = f"{t.name}\n{t.summary()}"
        lines.append(
            f"    {_dot_quote('topic:' + t.name)} [shape=cylinder, label={_dot_quote(label)}];"
        )
    for e in graph.edges:
        source, target = f"streamlet:{e.streamlet}", f"topic:{e.topic}"
        if e.direction == "consume":
            source, target = target, source
        style = ", style=dashed" if e.control else ""
        label = _dot_quote(f"{e.port}\n{e.label}")
        lines.append(f"    {_dot_quote(source)} -> {_dot_quote(target)} [label={label}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
