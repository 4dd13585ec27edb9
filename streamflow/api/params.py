"""Typed config parameters with defaults and validation.

A parameter is a class attribute of a streamlet. Reading it on an instance
gives the configured value; the verifier validates blueprint values and
``--set`` strings against it before anything runs::

    threshold = params.Float(default=0.5, min=0.0, max=1.0, description="...")

``parse`` accepts what YAML or a command line gives (strings included) and
returns the typed value; it raises :class:`ValueError` with a message meant
for the user who wrote the config.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Generic, TypeVar, overload

__all__ = [
    "REQUIRED",
    "Bool",
    "Choice",
    "Duration",
    "Float",
    "Int",
    "List",
    "Mapping",
    "Param",
    "Str",
    "parse_duration",
]

T = TypeVar("T")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


class Param(Generic[T]):
    """Base of all parameter types."""

    type_name: ClassVar[str] = "any"

    def __init__(
        self,
        *,
        default: T | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
    ) -> None:
        self.default = default
        self.description = description
        self.name = name or ""
        self.attribute = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute
        if not self.name:
            self.name = attribute

    @overload
    def __get__(self, instance: None, owner: type) -> Param[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Param[T] | T:
        if instance is None:
            return self
        config: dict[str, Any] = getattr(instance, "_config", {})
        if self.name in config:
            return config[self.name]  # type: ignore[no-any-return]
        if isinstance(self.default, _Required):
            raise AttributeError(f"required parameter {self.name!r} has no value")
        return self.default

    @property
    def required(self) -> bool:
        return isinstance(self.default, _Required)

    def parse(self, raw: Any) -> T:
        """The typed, validated value for ``raw``; ``ValueError`` explains a bad one."""
        value = self._convert(raw)
        self._check(value)
        return value

    def _convert(self, raw: Any) -> T:
        raise NotImplementedError

    def _check(self, value: T) -> None:
        """Constraints beyond the type; subclasses raise ValueError."""

    def constraints(self) -> dict[str, Any]:
        return {}

    def to_json(self, value: T) -> Any:
        return value

    def default_problem(self) -> str | None:
        """Why the declared default is itself invalid, if it is."""
        if isinstance(self.default, _Required):
            return None
        try:
            self.parse(self.default)
        except ValueError as exc:
            return f"default {self.default!r} is invalid: {exc}"
        return None


class _Ranged(Param[T]):
    def __init__(
        self,
        *,
        default: T | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
        min: float | None = None,
        max: float | None = None,
    ) -> None:
        super().__init__(default=default, description=description, name=name)
        self.min = min
        self.max = max

    def _check(self, value: T) -> None:
        number = float(value)  # type: ignore[arg-type]
        if self.min is not None and number < self.min:
            raise ValueError(f"{value} is below the minimum {self.min:g}")
        if self.max is not None and number > self.max:
            raise ValueError(f"{value} is above the maximum {self.max:g}")

    def constraints(self) -> dict[str, Any]:
        return {k: v for k, v in (("min", self.min), ("max", self.max)) if v is not None}


class Int(_Ranged[int]):
    type_name = "int"

    def _convert(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str):
            try:
                return int(raw.strip().replace("_", ""))
            except ValueError:
                pass
        raise ValueError(f"expected an integer, got {raw!r}")


class Float(_Ranged[float]):
    type_name = "float"

    def _convert(self, raw: Any) -> float:
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {raw!r}")
        if isinstance(raw, int | float):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw)
            except ValueError:
                pass
        raise ValueError(f"expected a number, got {raw!r}")


class Str(Param[str]):
    type_name = "str"

    def __init__(
        self,
        *,
        default: str | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
        pattern: str | None = None,
        min_length: int = 0,
    ) -> None:
        super().__init__(default=default, description=description, name=name)
        self.pattern = pattern
        self.min_length = min_length

    def _convert(self, raw: Any) -> str:
        if isinstance(raw, str):
            return raw
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return str(raw)
        raise ValueError(f"expected a string, got {raw!r}")

    def _check(self, value: str) -> None:
        if len(value) < self.min_length:
            raise ValueError(f"{value!r} is shorter than {self.min_length} characters")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise ValueError(f"{value!r} does not match the pattern {self.pattern!r}")

    def constraints(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.pattern:
            out["pattern"] = self.pattern
        if self.min_length:
            out["min_length"] = self.min_length
        return out


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class Bool(Param[bool]):
    type_name = "bool"

    def _convert(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ValueError(f"expected true or false, got {raw!r}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(raw: Any) -> dt.timedelta:
    """``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``, or a number of seconds."""
    if isinstance(raw, dt.timedelta):
        return raw
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return dt.timedelta(seconds=raw)
    if isinstance(raw, str):
        match = _DURATION.match(raw)
        if match:
            return dt.timedelta(seconds=float(match[1]) * _UNIT_SECONDS[match[2]])
    raise ValueError(f"expected a duration such as 500ms, 5s, 2m or 1h, got {raw!r}")


class Duration(Param[dt.timedelta]):
    type_name = "duration"

    def __init__(
        self,
        *,
        default: dt.timedelta | str | float | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
        min: dt.timedelta | str | float | None = None,
        max: dt.timedelta | str | float | None = None,
    ) -> None:
        super().__init__(default=default, description=description, name=name)  # type: ignore[arg-type]
        self.min = parse_duration(min) if min is not None else None
        self.max = parse_duration(max) if max is not None else None

    def __get__(self, instance: object | None, owner: type) -> Any:
        value = super().__get__(instance, owner)
        return value if instance is None else parse_duration(value)

    def _convert(self, raw: Any) -> dt.timedelta:
        return parse_duration(raw)

    def _check(self, value: dt.timedelta) -> None:
        if self.min is not None and value < self.min:
            raise ValueError(f"{_fmt(value)} is shorter than the minimum {_fmt(self.min)}")
        if self.max is not None and value > self.max:
            raise ValueError(f"{_fmt(value)} is longer than the maximum {_fmt(self.max)}")

    def to_json(self, value: dt.timedelta) -> Any:
        return _fmt(parse_duration(value))

    def constraints(self) -> dict[str, Any]:
        return {k: _fmt(v) for k, v in (("min", self.min), ("max", self.max)) if v is not None}


def _fmt(value: dt.timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


class List(Param[list[Any]]):
    """A list whose items are each parsed by ``item`` (another parameter type)."""

    type_name = "list"

    def __init__(
        self,
        item: Param[Any] | None = None,
        *,
        default: Sequence[Any] | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
        min_items: int = 0,
    ) -> None:
        stored = list(default) if not isinstance(default, _Required) else default
        super().__init__(default=stored, description=description, name=name)
        self.item = item or Str(default="")
        self.min_items = min_items

    def _convert(self, raw: Any) -> list[Any]:
        if isinstance(raw, str):
            raw = [part.strip() for part in raw.split(",") if part.strip()]
        if not isinstance(raw, list | tuple):
            raise ValueError(f"expected a list, got {raw!r}")
        out = []
        for index, item in enumerate(raw):
            try:
                out.append(self.item.parse(item))
            except ValueError as exc:
                raise ValueError(f"item {index}: {exc}") from None
        return out

    def _check(self, value: list[Any]) -> None:
        if len(value) < self.min_items:
            raise ValueError(f"needs at least {self.min_items} items, got {len(value)}")

    def constraints(self) -> dict[str, Any]:
        out: dict[str, Any] = {"items": self.item.type_name}
        if self.min_items:
            out["min_items"] = self.min_items
        return out


class Choice(Param[str]):
    type_name = "choice"

    def __init__(
        self,
        choices: Sequence[str],
        *,
        default: str | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
    ) -> None:
        super().__init__(default=default, description=description, name=name)
        self.choices = tuple(choices)

    def _convert(self, raw: Any) -> str:
        if not isinstance(raw, str):
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {raw!r}")
        return raw

    def _check(self, value: str) -> None:
        if value not in self.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(self.choices)}")

    def constraints(self) -> dict[str, Any]:
        return {"choices": list(self.choices)}


class Mapping(Param[dict[str, Any]]):
    """Names to structured values (a YAML mapping), checked by an optional ``check``.

    ``check(value)`` raises ``ValueError`` with a message for the user; the verifier
    reports it at the value's line. On a command line (``--set``) the value is JSON.
    """

    type_name = "mapping"

    def __init__(
        self,
        *,
        check: Callable[[dict[str, Any]], object] | None = None,
        default: dict[str, Any] | _Required = REQUIRED,
        description: str = "",
        name: str | None = None,
    ) -> None:
        stored = dict(default) if not isinstance(default, _Required) else default
        super().__init__(default=stored, description=description, name=name)
        self.check = check

    def _convert(self, raw: Any) -> dict[str, Any]:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a mapping (JSON on a command line): {exc}") from None
        if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
            raise ValueError(f"expected a mapping of names to values, got {raw!r}")
        return raw

    def _check(self, value: dict[str, Any]) -> None:
        if self.check is not None and value:
            self.check(value)
