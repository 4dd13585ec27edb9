"""Turning CSV cells (always text) into the JSON values a schema's fields expect.

CSV has no types, so the schema supplies them: ``"3"`` becomes ``3`` for an
``int`` field and ``3.0`` for a ``double``; ``"true"`` a boolean. The result is
a JSON-like document that then goes through the same coercion and validation
as a JSON line (:meth:`~streamflow.schema.JsonCodec.from_json`), so both
formats accept and reject the same records, with the same messages.

Conventions, for cells that text cannot type on its own:

* an empty cell is ``null`` for a nullable field; for another field that has
  a default it is left out, so the default applies; a ``string`` field keeps
  ``""``;
* a union tries its branches in order and takes the first that parses;
* a record, array or map cell holds JSON (``[1, 2]``);
* a cell that does not parse is passed on as text, so validation names the
  field and the value instead of this module guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from streamflow.schema import validate
from streamflow.schema.store import Schema
from streamflow.streamlets.io import _jsontext

__all__ = ["CsvCoercer"]

_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0"})
_TEXT_KINDS = frozenset({"string", "enum", "bytes", "fixed"})


class _Omit:
    pass


_OMIT: Final = _Omit()


class CsvCoercer:
    """Converts the cells of one CSV row for ``schema``; unknown columns are dropped."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._named = validate.named_types(schema)
        self._fields: dict[str, dict[str, Any]] = {
            f["name"]: f for f in schema.parsed.get("fields", [])
        }

    def row(self, cells: Mapping[str, str]) -> dict[str, Any]:
        """A JSON-like document for the row; validation happens later, with the JSON path."""
        out: dict[str, Any] = {}
        for column, text in cells.items():
            field = self._fields.get(column)
            if field is None:
                continue
            value = self._field(field, text)
            if value is not _OMIT:
                out[column] = value
        return out

    def _field(self, field: dict[str, Any], text: str) -> Any:
        node = self._resolve(field["type"])
        omittable = not isinstance(node, list) and _kind(node) != "string" and "default" in field
        if text == "" and omittable:
            return _OMIT
        try:
            return self._convert(node, text)
        except ValueError:
            return text

    def _resolve(self, node: Any) -> Any:
        node = self._named.get(node, node) if isinstance(node, str) else node
        if isinstance(node, dict) and isinstance(node.get("type"), dict | list):
            return self._resolve(node["type"])
        return node

    def _convert(self, node: Any, text: str) -> Any:
        """The value of ``text`` for ``node``; ValueError when it does not parse as one."""
        node = self._resolve(node)
        if isinstance(node, list):
            return self._union(node, text)
        kind = _kind(node)
        logical = node.get("logicalType") if isinstance(node, dict) else None
        if logical and kind in ("int", "long"):
            return _integer(text) if _looks_integral(text) else text  # ISO text is coerced later
        return _CONVERTERS.get(kind, _json)(text)

    def _union(self, branches: list[Any], text: str) -> Any:
        if text == "" and "null" in branches:
            return None
        for branch in branches:
            if branch == "null":
                continue
            try:
                return self._convert(branch, text)
            except ValueError:
                continue
        raise ValueError(f"{text!r} fits no branch of the union")


def _kind(node: Any) -> str:
    return node if isinstance(node, str) else str(node.get("type"))


def _looks_integral(text: str) -> bool:
    return text.strip().lstrip("+-").isdigit()


def _integer(text: str) -> int:
    return int(text.strip())


def _floating(text: str) -> float:
    return float(text.strip())


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean")


def _null(text: str) -> None:
    if text.strip() == "" or text.strip().lower() == "null":
        return None
    raise ValueError(f"{text!r} is not null")


def _text(text: str) -> str:
    return text


def _json(text: str) -> Any:
    return _jsontext.parse(text)  # ValueError, with its reason, for any text it refuses


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": _integer,
    "long": _integer,
    "float": _floating,
    "double": _floating,
    "boolean": _boolean,
    "null": _null,
    **{kind: _text for kind in _TEXT_KINDS},
}
