"""Binding a generic built-in streamlet to a schema, and finding that schema at run time.

Port schemas are static class attributes, so that the verifier can check a
blueprint without running anything. A built-in that works for any schema
therefore declares its port *without* a schema, and a user binds one with a
subclass that redeclares the port. :meth:`SchemaBound.for_schema` writes that
subclass for them.

At run time the streamlet needs the schema itself, not just its name: to
synthesise records, coerce CSV cells and validate JSON. The runtime and the
testkit hand over the application's :class:`~streamflow.schema.SchemaStore` as
``context.schema_store``; without one, the built-in schemas and the
project's ``schemas/`` directory (found from the working directory) are searched.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, ClassVar, Self, cast

from streamflow.api.ports import Outlet, Port
from streamflow.api.streamlet import Context
from streamflow.blueprint import paths
from streamflow.schema.store import Schema, SchemaError, SchemaStore

__all__ = ["SchemaBound", "check_key_field", "key_of", "schema_store"]


class SchemaBound:
    """Mixin for a built-in whose port named by ``generic_port`` gets its schema from a subclass."""

    generic_port: ClassVar[str] = "out"

    @classmethod
    def for_schema(
        cls, schema: str, *, name: str | None = None, module: str | None = None
    ) -> type[Self]:
        """A subclass of this streamlet whose generic port carries ``schema``.

        Assign the result to a module-level name (``WineFeed = Generator.for_schema(...)``)
        so that a blueprint can reference it as ``module:WineFeed``; ``name`` should be
        that same name. ``module`` defaults to the caller's module.
        """
        if not schema:
            raise ValueError(f"{cls.__name__}.for_schema needs a schema's full name")
        port = cast(Port, getattr(cls, cls.generic_port))
        class_name = name or f"{schema.rsplit('.', 1)[-1]}{cls.__name__}"
        namespace: dict[str, Any] = {
            cls.generic_port: _rebound(port, schema),
            "__module__": module or _caller_module(),
            "__qualname__": class_name,
            "__doc__": f"{_summary(cls)}\n\nBound to the schema {schema}.",
        }
        return cast(type[Self], type(class_name, (cls,), namespace))

    @classmethod
    def bound_schema_name(cls) -> str:
        """The schema of the generic port; a clear error while the class is still generic."""
        port = cast(Port, getattr(cls, cls.generic_port))
        if not port.schema:
            raise ValueError(
                f"{cls.__qualname__} is generic: its port {port.name!r} has no schema. "
                f"Subclass it and declare {cls.generic_port} = {type(port).__name__}"
                f"({port.name!r}, 'my.Schema'), or use {cls.__qualname__}.for_schema('my.Schema')"
            )
        return port.schema

    def bound_schema(self, context: Context) -> Schema:
        """The schema of the generic port, from the store the runtime passed in ``context``."""
        name = self.bound_schema_name()
        try:
            return schema_store(context).get(name)
        except SchemaError as exc:
            raise ValueError(f"{type(self).__qualname__}: {exc}") from None


def schema_store(context: Context) -> SchemaStore:
    """The runtime's store, or one over the built-in and the project's schemas."""
    if context.schema_store is None:
        project = paths.project_schema_dir(start=Path.cwd())
        context.schema_store = SchemaStore([project] if project is not None else [])
    return context.schema_store


def check_key_field(schema: Schema, key_field: str) -> None:
    """A ``key_field`` parameter must name a top-level field of the schema."""
    if key_field and key_field not in schema.field_names():
        fields = ", ".join(schema.field_names())
        raise ValueError(f"key_field {key_field!r} is not a field of {schema.name} ({fields})")


def key_of(value: Any) -> str | None:
    """A Kafka key (a string, or None) for a field value."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _rebound(port: Port, schema: str) -> Port:
    if isinstance(port, Outlet):
        return Outlet(port.name, schema, key=port.key, description=port.description)
    return type(port)(port.name, schema, description=port.description)


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or cls.__name__
    return doc.split("\n\n", 1)[0]


def _caller_module() -> str:
    # Like namedtuple and Enum's functional API: the class belongs where it is created.
    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", "__main__"))
