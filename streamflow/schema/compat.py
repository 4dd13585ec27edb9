"""Reader/writer compatibility under the Avro schema-resolution rules.

The verifier asks, for every topic, whether each consumer's schema can read
what each producer writes. The rules are those of the Avro specification
("Schema Resolution"), with the same choices as the Java reference checker:
named types match by unqualified name or a reader alias, a reader field the
writer lacks needs a default, writer-only fields are skipped, and logical
types resolve on their underlying type.

We walk the schemas ourselves rather than call the reference checker
(``avro.compatibility``) because that one merges its findings into two
unordered sets, so a message cannot be paired with its location, and its
messages are terse (a missing default is reported as just the field name).
The tests check that our verdict agrees with the reference checker's.
"""

from __future__ import annotations

from typing import Any

from streamflow.schema import validate
from streamflow.schema.store import Schema

__all__ = ["compatibility_problems"]

# writer type -> reader types that can read it (besides the same type)
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def compatibility_problems(*, reader: Schema, writer: Schema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer``; empty if it can."""
    if reader.fingerprint == writer.fingerprint:
        return []
    checker = _Checker(validate.named_types(reader), validate.named_types(writer))
    checker.check(reader.parsed, writer.parsed, "")
    return checker.problems


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    kind = node.get("type") if isinstance(node, dict) else node
    return _kind(kind) if isinstance(kind, dict | list) else str(kind)


def _label(node: Any) -> str:
    if isinstance(node, list):
        return "union [" + ", ".join(_label(b) for b in node) + "]"
    kind = _kind(node)
    if kind in ("record", "enum", "fixed"):
        return f"{kind} {node['name']}"
    if kind == "array":
        return f"array of {_label(node['items'])}"
    if kind == "map":
        return f"map of {_label(node['values'])}"
    return kind


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Checker:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.problems: list[str] = []
        self._seen: set[tuple[str, str]] = set()

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}" if path else message)

    def quietly_compatible(self, reader: Any, writer: Any) -> bool:
        probe = _Checker(self.reader_named, self.writer_named)
        probe._seen = set(self._seen)
        probe.check(reader, writer, "")
        return not probe.problems

    def check(self, reader: Any, writer: Any, path: str) -> None:
        reader = self.reader_named.get(reader, reader) if isinstance(reader, str) else reader
        writer = self.writer_named.get(writer, writer) if isinstance(writer, str) else writer
        if isinstance(writer, list):
            self.check_writer_union(reader, writer, path)
        elif isinstance(reader, list):
            self.check_reader_union(reader, writer, path)
        elif _kind(reader) == _kind(writer):
            self.check_same_kind(reader, writer, path)
        elif _kind(reader) not in _PROMOTIONS.get(_kind(writer), ()):
            self.fail(
                path, f"the reader expects {_label(reader)}, the writer writes {_label(writer)}"
            )

    def check_writer_union(self, reader: Any, writer: list[Any], path: str) -> None:
        # Any branch may have been written, so the reader must read every one.
        for branch in writer:
            if isinstance(reader, list):
                if not any(self.quietly_compatible(r, branch) for r in reader):
                    self.fail(path, f"the reader's {_label(reader)} cannot read {_label(branch)}")
            else:
                self.check(reader, branch, path)

    def check_reader_union(self, reader: list[Any], writer: Any, path: str) -> None:
        if any(self.quietly_compatible(branch, writer) for branch in reader):
            return
        same = [b for b in reader if _kind(b) == _kind(writer) and _kind(b) in ("record", "enum")]
        if len(same) == 1:  # say what is wrong inside the branch that was meant
            self.check(same[0], writer, path)
        else:
            self.fail(path, f"the reader's {_label(reader)} has no branch for {_label(writer)}")

    def check_same_kind(self, reader: Any, writer: Any, path: str) -> None:
        kind = _kind(reader)
        if kind == "array":
            self.check(reader["items"], writer["items"], f"{path}[]")
        elif kind == "map":
            self.check(reader["values"], writer["values"], f"{path}{{}}")
        elif kind in ("record", "enum", "fixed"):
            if not self.names_match(reader, writer, path):
                return
            key = (reader["name"], writer["name"])
            if key in self._seen:  # a recursive type: already being checked
                return
            self._seen.add(key)
            getattr(self, f"check_{kind}")(reader, writer, path)

    def names_match(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> bool:
        if _short(reader["name"]) == _short(writer["name"]):
            return True
        if writer["name"] in _aliases(reader):
            return True
        self.fail(
            path,
            f"the reader's {_label(reader)} does not match the writer's {_label(writer)} "
            f"(keep the name, or add {writer['name']!r} to the reader's aliases)",
        )
        return False

    def check_record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            name = field["name"]
            field_path = f"{path}.{name}" if path else name
            match = written.get(name) or next(
                (written[a] for a in field.get("aliases", ()) if a in written), None
            )
            if match is not None:
                self.check(field["type"], match["type"], field_path)
            elif "default" not in field:
                self.fail(
                    field_path,
                    f"the reader's field {name!r} has no default and the writer does not "
                    "write it (give the field a default)",
                )

    def check_enum(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and reader.get("default") not in reader["symbols"]:
            self.fail(
                path,
                f"the reader's enum {reader['name']} lacks {', '.join(missing)}, which the "
                "writer may write (add the symbols back, or give the enum a default)",
            )

    def check_fixed(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if reader["size"] != writer["size"]:
            self.fail(
                path,
                f"fixed {reader['name']} is {reader['size']} bytes in the reader "
                f"but {writer['size']} in the writer",
            )


def _aliases(named: dict[str, Any]) -> set[str]:
    """A named type's aliases as full names (relative ones take its namespace)."""
    namespace = named["name"].rpartition(".")[0]
    return {
        a if "." in a or not namespace else f"{namespace}.{a}" for a in named.get("aliases", ())
    }
