"""Load Avro schemas from search paths and resolve named types across files.

A blueprint refers to a schema by its full name (``streamflow.ml.ModelDescriptor``).
The store scans ``.avsc`` files on its search paths, collects every named type
(records, enums and fixed, also those nested inside other schemas) and rewrites
all names to their full form. A schema handed out is then *self-contained*:
every referenced type is inlined at its first use. That is what the
fingerprint, the reference implementation and fastavro all need, and it means a
file may use a type defined in another file without any import mechanism.

Loading never raises for a bad file: the problems are collected, with the
file, line and column, so the blueprint verifier can report all of them.
References are resolved only when asked (``get``) or when ``problems`` is read,
never while files are still being loaded: a record may name a type from a file
that sorts after its own, or from a later search path.

A name has one current definition. Older (or other) versions of a type, which
only serve to decode records written with them, live under a directory named
``history`` on a search path (or come from :meth:`SchemaStore.add_version`):
they are found by fingerprint, and never conflict with the current one.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from streamflow.schema import fingerprint as fp

__all__ = [
    "HISTORY_DIR",
    "PRIMITIVES",
    "Schema",
    "SchemaError",
    "SchemaStore",
    "builtin_schema_dir",
]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})
HISTORY_DIR = "history"


def builtin_schema_dir() -> Path:
    """The schemas shipped inside the package (``streamflow.ml.*`` and friends)."""
    return Path(__file__).parent / "builtin"


class SchemaError(Exception):
    """A schema that cannot be loaded or found, located in its file where possible."""

    #: the full name of the type the error is about, when known (used to locate it)
    subject: str | None = None

    def __init__(
        self, message: str, *, path: Path | None = None, line: int = 1, column: int = 1
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.column = column

    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.column}" if self.path else "<schema>"

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class Schema:
    """A named, self-contained, parsed Avro schema."""

    name: str
    raw: dict[str, Any] = field(repr=False, compare=False)
    parsed: Any = field(repr=False, compare=False)
    fingerprint: int
    source: Path | None = field(default=None, compare=False)

    @property
    def fingerprint_hex(self) -> str:
        return f"{self.fingerprint:016x}"

    @property
    def doc(self) -> str:
        return str(self.raw.get("doc", ""))

    def field_names(self) -> list[str]:
        return [str(f["name"]) for f in self.raw.get("fields", [])]


@dataclass
class _Definition:
    name: str
    body: dict[str, Any]
    source: Path | None
    line: int


def _full_name(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class SchemaStore:
    """Every named Avro type found on a set of search paths.

    ``problems`` holds what could not be loaded; lookups of good schemas still work.
    """

    def __init__(self, paths: Iterable[Path | str] = (), *, include_builtin: bool = True) -> None:
        self._defs: dict[str, _Definition] = {}
        self._cache: dict[str, Schema] = {}
        self._by_fingerprint: dict[int, Schema] = {}
        self._load_problems: list[SchemaError] = []
        self._resolved_all = False
        self._pending_versions: list[tuple[Any, Path | None, str]] = []
        self._versions: dict[int, Schema] = {}
        self.paths: list[Path] = []
        if include_builtin:
            self.add_path(builtin_schema_dir())
        for path in paths:
            self.add_path(Path(path))

    # -- loading -------------------------------------------------------------

    def add_path(self, path: Path) -> None:
        """Load one ``.avsc`` file, or every ``.avsc`` file under a directory."""
        self.paths.append(path)
        if path.is_dir():
            for file in sorted(path.rglob("*.avsc")):
                is_history = HISTORY_DIR in file.relative_to(path).parts[:-1]
                self.add_file(file, version=is_history)
        elif path.is_file():
            self.add_file(path)
        else:
            self._load_problems.append(SchemaError(f"schema path {str(path)!r} does not exist"))

    def add_file(self, path: Path, *, version: bool = False) -> None:
        """Load one ``.avsc`` file; ``version``: as an older version (see the module doc)."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self._load_problems.append(SchemaError(f"cannot read schema file: {exc}", path=path))
            return
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            self._load_problems.append(
                SchemaError(
                    f"not valid JSON: {exc.msg}", path=path, line=exc.lineno, column=exc.colno
                )
            )
            return
        if version:
            self.add_version(doc, source=path, text=text)
        else:
            self.add_schema(doc, source=path, text=text)

    def add_version(self, doc: Any, *, source: Path | None = None, text: str = "") -> None:
        """Register another version of a named type, to decode records written with it.

        Its own named types take precedence; other references resolve to the
        store's current types. It is resolved lazily, like everything else.
        """
        self._pending_versions.append((doc, source, text))
        self._resolved_all = False

    def add_schema(self, doc: Any, *, source: Path | None = None, text: str = "") -> list[str]:
        """Register the named types in one schema document; returns their full names.

        Nothing is resolved yet: a reference to a type that is loaded later is fine.
        """
        found: list[_Definition] = []
        try:
            _normalise(doc, None, found)
        except SchemaError as exc:
            exc.path = exc.path or source
            if exc.subject:
                exc.line = _line_of(text, exc.subject)
            self._load_problems.append(exc)
            return []
        added = []
        for definition in found:
            definition.source = source
            definition.line = _line_of(text, definition.name)
            previous = self._defs.get(definition.name)
            if previous is not None and previous.body != definition.body:
                self._load_problems.append(
                    SchemaError(
                        f"{definition.name} is defined differently in {previous.source}",
                        path=source,
                        line=definition.line,
                    )
                )
                continue
            self._defs[definition.name] = definition
            self._cache.pop(definition.name, None)
            self._resolved_all = False
            added.append(definition.name)
        return added

    @property
    def problems(self) -> list[SchemaError]:
        """Every problem: files that did not load, and types that do not resolve."""
        return [*self._load_problems, *self._resolve_all()]

    # -- lookups -------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self._defs)

    def __contains__(self, name: object) -> bool:
        return name in self._defs

    def find(self, name: str) -> Schema | None:
        try:
            return self.get(name)
        except SchemaError:
            return None

    def get(self, name: str) -> Schema:
        """The self-contained schema for a full name; :class:`SchemaError` if unknown."""
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        definition = self._defs.get(name)
        if definition is None:
            raise SchemaError(f"unknown schema {name!r}{self._suggestion(name)}")
        schema = _build(definition, self._defs)
        self._cache[name] = schema
        self._by_fingerprint[schema.fingerprint] = schema
        return schema

    def by_fingerprint(self, fingerprint: int) -> Schema | None:
        """The schema with this fingerprint: a current type, or a version of one."""
        hit = self._by_fingerprint.get(fingerprint) or self._versions.get(fingerprint)
        if hit is None and not self._resolved_all:
            self._resolve_all()
            hit = self._by_fingerprint.get(fingerprint) or self._versions.get(fingerprint)
        return hit

    def _resolve_all(self) -> list[SchemaError]:
        """Resolve every type and version; the errors, one per distinct message."""
        unresolved: dict[str, SchemaError] = {}
        for name in self._defs:
            try:
                self.get(name)
            except SchemaError as exc:
                unresolved.setdefault(str(exc), exc)
        for doc, source, text in self._pending_versions:
            try:
                version = self._build_version(doc, source, text)
            except SchemaError as exc:
                unresolved.setdefault(str(exc), exc)
                continue
            self._versions.setdefault(version.fingerprint, version)
        self._resolved_all = True
        return list(unresolved.values())

    def version_from(self, doc: Any) -> Schema:
        """A schema from a document (one named type), not added to the store.

        For writer schemas met at run time (a registry's): named types it does
        not define itself resolve to the store's; :class:`SchemaError` if invalid.
        """
        return self._build_version(doc, None, "")

    def _build_version(self, doc: Any, source: Path | None, text: str) -> Schema:
        found: list[_Definition] = []
        try:
            top = _normalise(doc, None, found)
        except SchemaError as exc:
            exc.path = exc.path or source
            if exc.subject:
                exc.line = _line_of(text, exc.subject)
            raise
        if not isinstance(top, str) or not found or found[-1].name != top:
            raise SchemaError("a schema version must be one named type", path=source)
        for definition in found:
            definition.source = source
            definition.line = _line_of(text, definition.name)
        return _build(found[-1], {**self._defs, **{d.name: d for d in found}})

    def _suggestion(self, name: str) -> str:
        """`` (did you mean 'a.B'?)`` for a misspelt or unqualified name, else ``""``."""
        short = name.rsplit(".", 1)[-1].lower()
        same_short = [n for n in self._defs if n.rsplit(".", 1)[-1].lower() == short]
        close = same_short or difflib.get_close_matches(name, list(self._defs), n=1, cutoff=0.75)
        if not close:
            by_short = {n.rsplit(".", 1)[-1].lower(): n for n in self._defs}
            shorts = difflib.get_close_matches(short, list(by_short), n=1, cutoff=0.75)
            close = [by_short[s] for s in shorts]
        return f" (did you mean {close[0]!r}?)" if close else ""


def _build(definition: _Definition, defs: dict[str, _Definition]) -> Schema:
    """The self-contained, parsed schema of one definition, with named types from ``defs``."""
    name = definition.name
    raw = _inline(definition.body, {name}, defs, definition)
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(raw))
    except Exception as exc:  # fastavro raises several exception types
        raise SchemaError(
            f"{name} is not a valid Avro schema: {exc}",
            path=definition.source,
            line=definition.line,
        ) from None
    return Schema(
        name=name,
        raw=raw,
        parsed=parsed,
        fingerprint=fp.fingerprint64(parsed),
        source=definition.source,
    )


def _about(subject: str, message: str) -> SchemaError:
    error = SchemaError(message)
    error.subject = subject
    return error


def _normalise(node: Any, namespace: str | None, found: list[_Definition]) -> Any:
    """Rewrite ``node`` with full names; nested named types become references."""
    if isinstance(node, str):
        return node if node in PRIMITIVES else _full_name(node, namespace)
    if isinstance(node, list):
        return [_normalise(item, namespace, found) for item in node]
    if not isinstance(node, dict):
        raise SchemaError(f"a schema must be a name, an object or a union, not {node!r}")
    kind = node.get("type")
    if kind in _NAMED_KINDS:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"a {kind} schema needs a string 'name'")
        own_ns = node.get("namespace", namespace)
        full = _full_name(name, own_ns if isinstance(own_ns, str) else namespace)
        inner_ns = full.rsplit(".", 1)[0] if "." in full else None
        body = {k: v for k, v in node.items() if k != "namespace"}
        body["name"] = full
        symbols = node.get("symbols")
        if kind == "enum" and not (
            isinstance(symbols, list) and all(isinstance(s, str) for s in symbols)
        ):
            raise _about(full, f"enum {full} needs a 'symbols' list of names")
        if kind in ("record", "error"):
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise _about(full, f"record {full} needs a 'fields' list")
            body["fields"] = [_normalise_field(f, inner_ns, found, full) for f in fields]
        found.append(_Definition(full, body, None, 1))
        return full
    if kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        if key not in node:
            raise SchemaError(f"an {kind} schema needs '{key}'")
        return {**node, key: _normalise(node[key], namespace, found)}
    if isinstance(kind, str | list | dict):
        # a primitive with attributes (logical types) or a wrapped type
        return {**node, "type": _normalise(kind, namespace, found)}
    raise SchemaError(f"a schema object needs a 'type', got {node!r}")


def _normalise_field(
    node: Any, namespace: str | None, found: list[_Definition], record: str
) -> Any:
    if not isinstance(node, dict) or "name" not in node or "type" not in node:
        raise _about(record, f"each field of {record} needs a 'name' and a 'type'")
    return {**node, "type": _normalise(node["type"], namespace, found)}


def _inline(node: Any, defined: set[str], defs: dict[str, _Definition], where: _Definition) -> Any:
    """Inline each referenced named type at its first use, so the result stands alone."""
    if isinstance(node, str):
        if node in PRIMITIVES:
            return node
        if node in defined:
            return node
        target = defs.get(node)
        if target is None:
            raise SchemaError(
                f"{where.name} refers to unknown type {node!r}",
                path=where.source,
                line=where.line,
            )
        defined.add(node)
        return _inline(target.body, defined, defs, target)
    if isinstance(node, list):
        return [_inline(item, defined, defs, where) for item in node]
    if isinstance(node, dict):
        out = dict(node)
        if "fields" in node:
            out["fields"] = [
                {**f, "type": _inline(f["type"], defined, defs, where)} for f in node["fields"]
            ]
        for key in ("items", "values"):
            if key in node and node.get("type") in ("array", "map"):
                out[key] = _inline(node[key], defined, defs, where)
        if node.get("type") not in _NAMED_KINDS | {"array", "map"}:
            out["type"] = _inline(node["type"], defined, defs, where)
        return out
    return node


def _line_of(text: str, full_name: str) -> int:
    """The line where a named type is declared, found textually (JSON has no positions)."""
    short = full_name.rsplit(".", 1)[-1]
    pattern = re.compile(r'"name"\s*:\s*"(' + re.escape(full_name) + "|" + re.escape(short) + ')"')
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else 1
