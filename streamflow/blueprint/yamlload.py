"""YAML with positions: the blueprint as a tree of nodes that know their line and column.

The verifier must point at the exact key or value that is wrong, and must
report a duplicated key rather than silently keep one of them (which is what
plain ``yaml.load`` does). So we let ruamel.yaml *compose* the document (a
node graph that carries marks) and convert it ourselves: duplicate keys become
problems, scalars become plain Python values through the safe constructor,
and every node keeps its 1-based position. Nothing here raises for bad input.

An alias is expanded into a copy of what it names, so a few hundred bytes of
nested aliases (the "billion laughs") would become hundreds of millions of
nodes. Composing is cheap (an alias is a reference); the copies are made here,
so here they are counted: past :data:`MAX_ALIAS_NODES` copied nodes the
document is refused as ``invalid-yaml``, whatever its size otherwise.

Composing and converting recurse once per level of nesting, so a document
nested 100,000 deep (a few hundred KB of ``[``) would end in a RecursionError.
The parser's events come one at a time, so the nesting is measured on them
first, and past :data:`MAX_DEPTH` the document is refused as ``invalid-yaml``
where the level too many opens; the conversion holds copies made by aliases
to the same bound.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ruamel.yaml import YAML, events, nodes
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from streamflow.blueprint.problems import Position, Problem

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "Node", "parse_yaml"]

# Nodes that aliases may add in all: a blueprint's anchors repeat a few config blocks.
MAX_ALIAS_NODES = 10_000
# Mappings and lists nested in each other, at most: a blueprint needs a handful.
MAX_DEPTH = 64
_TOO_DEEP_HINT = "a blueprint needs only a few levels: write this value flatter"
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class Node:
    """One YAML value and where it starts. Mappings keep their keys' nodes too."""

    kind: Literal["map", "seq", "scalar"]
    line: int
    column: int
    value: Any = None
    entries: list[tuple[Node, Node]] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)
    text: str = ""

    def position(self, file: str) -> Position:
        return Position(file, self.line, self.column)

    def get(self, key: str) -> Node | None:
        """The value node of ``key`` in a mapping, if present."""
        return next((v for k, v in self.entries if k.text == key), None)

    def fields(self) -> Iterator[tuple[str, Node, Node]]:
        """``(key text, key node, value node)`` for each entry of a mapping."""
        for key, value in self.entries:
            yield key.text, key, value

    @property
    def is_null(self) -> bool:
        return self.kind == "scalar" and self.value is None

    def plain(self) -> Any:
        """The node as plain Python data (dicts, lists and scalars)."""
        if self.kind == "map":
            return {k.text: v.plain() for k, v in self.entries}
        if self.kind == "seq":
            return [item.plain() for item in self.items]
        return self.value

    def describe(self) -> str:
        """What this value is, for messages such as 'expected a string, got a list'."""
        if self.kind == "map":
            return "a mapping"
        if self.kind == "seq":
            return "a list"
        return _describe_scalar(self.value)


def _describe_scalar(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def parse_yaml(text: str, *, filename: str) -> tuple[Node | None, list[Problem]]:
    """The document's root node (None when it is empty or not YAML) and its problems."""
    try:
        too_deep = _too_deep(text, filename)  # composing recurses: measure the events first
        if too_deep is not None:
            return None, [too_deep]
        root = YAML(typ="rt").compose(io.StringIO(text))
    except MarkedYAMLError as exc:
        return None, [_yaml_problem(exc, filename)]
    except YAMLError as exc:
        return None, [Problem("invalid-yaml", str(exc), Position(filename))]
    if root is None:
        return None, []
    converter = _Converter(filename)
    try:
        node = converter.convert(root)
    except _Refused as refused:
        return None, [refused.problem]
    return node, converter.problems


def _too_deep(text: str, filename: str) -> Problem | None:
    """Where the document nests past :data:`MAX_DEPTH`, read from the parser's events
    (one at a time, without recursion), or None."""
    depth = 0
    for event in YAML(typ="rt").parse(io.StringIO(text)):
        if isinstance(event, events.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                return Problem(
                    "invalid-yaml",
                    f"the YAML nests deeper than {MAX_DEPTH} levels",
                    Position(filename, mark.line + 1, mark.column + 1),
                    hint=_TOO_DEEP_HINT,
                )
        elif isinstance(event, events.CollectionEndEvent):
            depth -= 1
    return None


def _yaml_problem(exc: MarkedYAMLError, filename: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    message = " ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
    return Problem(
        "invalid-yaml",
        f"not valid YAML: {message}",
        Position(filename, line, column),
        hint="check the indentation and quoting around this position",
    )


class _Refused(Exception):
    """Aliases expanded past a cap (copies, depth): the whole document is refused, not
    just one value."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Converter:
    """Turns composed ruamel nodes into :class:`Node`, collecting problems on the way."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.problems: list[Problem] = []
        self._constructor = YAML(typ="safe", pure=True).constructor
        self._active: set[int] = set()
        self._converted: set[int] = set()
        self._copies = 0
        self._copying: Position | None = None  # the anchor whose copy is being made
        self._depth = 0  # of the node being converted, copies of anchors included

    def convert(self, raw: nodes.Node) -> Node:
        line, column = raw.start_mark.line + 1, raw.start_mark.column + 1
        outermost = self._count_copy(raw, line, column)
        try:
            return self._convert(raw, line, column)
        finally:
            if outermost:
                self._copying = None

    def _convert(self, raw: nodes.Node, line: int, column: int) -> Node:
        if id(raw) in self._active:  # a recursive alias: refuse rather than loop forever
            self._problem("wrong-type", "a recursive YAML alias is not supported", line, column)
            return Node("scalar", line, column)
        self._active.add(id(raw))
        self._depth += 1
        try:
            if isinstance(raw, nodes.MappingNode | nodes.SequenceNode):
                self._check_depth(line, column)
            if isinstance(raw, nodes.MappingNode):
                return Node("map", line, column, entries=self._entries(raw))
            if isinstance(raw, nodes.SequenceNode):
                return Node("seq", line, column, items=[self.convert(i) for i in raw.value])
            return self._scalar(raw, line, column)
        finally:
            self._depth -= 1
            self._active.discard(id(raw))

    def _check_depth(self, line: int, column: int) -> None:
        """The document nests within :data:`MAX_DEPTH` (checked before composing), but an
        alias's copy sits as deep as the alias, and can hold aliases itself."""
        if self._depth > MAX_DEPTH:
            raise _Refused(
                Problem(
                    "invalid-yaml",
                    f"the YAML nests deeper than {MAX_DEPTH} levels once its aliases are "
                    "expanded (through the anchor here)",
                    self._copying or Position(self.filename, line, column),
                    hint=_TOO_DEEP_HINT,
                )
            )

    def _count_copy(self, raw: nodes.Node, line: int, column: int) -> bool:
        """A node converted a second time is an alias's copy: count it against the cap.

        True when this starts the copy of an anchor (not a node inside one), which
        is the position a refusal points at.
        """
        if id(raw) not in self._converted:
            self._converted.add(id(raw))
            return False
        self._copies += 1
        outermost = self._copying is None
        if outermost:
            self._copying = Position(self.filename, line, column)
        if self._copies > MAX_ALIAS_NODES:
            raise _Refused(
                Problem(
                    "invalid-yaml",
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes "
                    "(the anchor here is repeated too often)",
                    self._copying or Position(self.filename, line, column),
                    hint="write the repeated values out, or repeat them fewer times",
                )
            )
        return outermost

    def _scalar(self, raw: nodes.Node, line: int, column: int) -> Node:
        text = str(raw.value)
        try:
            value = self._constructor.construct_object(raw, deep=True)
        except YAMLError as exc:
            reason = exc.problem if isinstance(exc, MarkedYAMLError) else str(exc)
            self._problem("wrong-type", f"unsupported YAML value {text!r}: {reason}", line, column)
            value = text
        return Node("scalar", line, column, value=value, text=text)

    def _entries(self, raw: nodes.MappingNode) -> list[tuple[Node, Node]]:
        entries: list[tuple[Node, Node]] = []
        merged: list[tuple[Node, Node]] = []
        seen: dict[str, Node] = {}
        for raw_key, raw_value in raw.value:
            if _tag(raw_key) == _MERGE_TAG:
                merged.extend(self._merged(raw_value))
                continue
            key, value = self.convert(raw_key), self.convert(raw_value)
            if key.kind != "scalar":
                self._problem("wrong-type", "a key must be a plain name", key.line, key.column)
                continue
            first = seen.get(key.text)
            if first is not None:
                self._problem(
                    "duplicate-key",
                    f"key {key.text!r} appears more than once (first at line {first.line}); "
                    "only the first is used",
                    key.line,
                    key.column,
                    hint="remove or rename one of them",
                )
                continue
            seen[key.text] = key
            entries.append((key, value))
        # Merged keys (YAML "<<") never override keys written in the mapping itself.
        entries.extend((k, v) for k, v in merged if k.text not in seen)
        return entries

    def _merged(self, raw: nodes.Node) -> list[tuple[Node, Node]]:
        sources = raw.value if isinstance(raw, nodes.SequenceNode) else [raw]
        out: list[tuple[Node, Node]] = []
        for source in sources:
            node = self.convert(source)
            if node.kind == "map":
                out.extend(node.entries)
            else:
                self._problem("wrong-type", "'<<' must merge a mapping", node.line, node.column)
        return out

    def _problem(self, code: str, message: str, line: int, column: int, hint: str = "") -> None:
        self.problems.append(Problem(code, message, Position(self.filename, line, column), hint))


def _tag(raw: nodes.Node) -> str:
    tag = raw.tag
    return str(getattr(tag, "value", tag))
