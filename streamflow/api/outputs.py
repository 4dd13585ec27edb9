"""Routing what a streamlet's logic returned to its outlets, with keys.

Logic returns an *output*: ``None`` (nothing), a dict (a record for the only
outlet), an :class:`~streamflow.api.ports.Emit` (a record for a named outlet),
or an iterable of those. The Kafka runtime and the testkit must agree exactly
on what that means, so both route through :class:`OutputRouter`, and a unit
test of a streamlet predicts what the deployed streamlet writes.

The key of each output is decided here, in this order:

1. the key given to ``Emit`` (``None`` there means "unkeyed", on purpose);
2. else the outlet's key function, ``Outlet(key=...)``, applied to the value;
3. else the key of the input record, so keys are preserved through processors
   (``None`` for what an ingress emits).

A result that cannot be routed raises :class:`OutputError`, phrased for the
streamlet's author: it is a bug in the logic, not in the data.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from streamflow.api.descriptor import StreamletDescriptor
from streamflow.api.ports import KEEP_KEY, Emit, KeyFunction, Outlet

__all__ = ["OutputError", "OutputRouter", "RoutedOutput", "normalise_outputs"]

_NO_HEADERS: Mapping[str, str] = types.MappingProxyType({})


class OutputError(ValueError):
    """A logic result that cannot be routed to the streamlet's outlets."""


class RoutedOutput(NamedTuple):
    """One record to write: which outlet, with which key, value and extra headers."""

    outlet: str
    key: str | None
    value: dict[str, Any]
    headers: Mapping[str, str] = _NO_HEADERS


class OutputRouter:
    """Routes logic results for one streamlet class; build it once, call it per result."""

    def __init__(self, descriptor: StreamletDescriptor) -> None:
        self.class_path = descriptor.class_path
        self.outlets = [port.name for port in descriptor.outlets]
        self._key_functions: dict[str, KeyFunction | None] = {
            port.name: _key_function(descriptor, port.attribute) for port in descriptor.outlets
        }

    def route(self, result: Any, *, input_key: str | None) -> list[RoutedOutput]:
        """The outputs in ``result``, in order; ``input_key`` is the key to preserve."""
        if result is None:
            return []
        if isinstance(result, dict | Emit):
            return [self._one(result, input_key)]
        if isinstance(result, str | bytes) or not isinstance(result, Iterable):
            raise OutputError(self._bad_result(result))
        return [self._one(item, input_key) for item in result if item is not None]

    def batch_results(self, result: Any, count: int) -> list[Any]:
        """What ``process_batch`` returned for ``count`` records: one result per record.

        ``None`` means "no output for any record" (an egress, say); anything else
        must hold exactly one result per input, in order, or keys, dead letters
        and offsets could not be matched to their inputs.
        """
        if result is None:
            return [None] * count
        if isinstance(result, dict | Emit | str | bytes) or not isinstance(result, Iterable):
            raise OutputError(
                f"{self.class_path}.process_batch returned a {type(result).__name__}; "
                "it must return a list with one result per input record, in order"
            )
        results = list(result)
        if len(results) != count:
            raise OutputError(
                f"{self.class_path}.process_batch returned {len(results)} results for {count} "
                "records; it must return one result per input record, in order "
                "(None for a record without output)"
            )
        return results

    def _one(self, item: Any, input_key: str | None) -> RoutedOutput:
        if isinstance(item, Emit):
            return self._emit(item, input_key)
        if isinstance(item, dict):
            return self._output(self._only_outlet(), item, input_key)
        raise OutputError(self._bad_result(item, nested=True))

    def _emit(self, emit: Emit, input_key: str | None) -> RoutedOutput:
        if emit.outlet not in self._key_functions:
            raise OutputError(self._unknown_outlet(emit.outlet))
        if not isinstance(emit.value, dict):
            raise OutputError(
                f"Emit to outlet {emit.outlet!r} carries a {type(emit.value).__name__}; "
                "the value of an output must be a dict (a record of the outlet's schema)"
            )
        headers = emit.headers or _NO_HEADERS
        if emit.key is KEEP_KEY:
            return self._output(emit.outlet, emit.value, input_key, headers)
        return RoutedOutput(
            emit.outlet, _checked_key(emit.key, emit.outlet, "Emit"), emit.value, headers
        )

    def _output(
        self,
        outlet: str,
        value: dict[str, Any],
        input_key: str | None,
        headers: Mapping[str, str] = _NO_HEADERS,
    ) -> RoutedOutput:
        key_function = self._key_functions[outlet]
        if key_function is None:
            return RoutedOutput(outlet, input_key, value, headers)
        try:
            key = key_function(value)
        except Exception as exc:
            raise OutputError(
                f"the key function of outlet {outlet!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        return RoutedOutput(outlet, _checked_key(key, outlet, "the key function"), value, headers)

    def _only_outlet(self) -> str:
        if len(self.outlets) == 1:
            return self.outlets[0]
        if not self.outlets:
            raise OutputError(
                f"{self.class_path} has no outlets, so its logic must return None, not a record"
            )
        names = ", ".join(self.outlets)
        raise OutputError(
            f"{self.class_path} has several outlets ({names}): a plain dict does not say which "
            "one it is for; return Emit(outlet, value) or self.<outlet>(value) instead"
        )

    def _unknown_outlet(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.outlets, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = ", ".join(self.outlets) or "none"
        return f"{self.class_path} has no outlet {name!r} ({hint}outlets: {known})"

    def _bad_result(self, result: Any, *, nested: bool = False) -> str:
        where = "an item of the returned iterable" if nested else "logic returned"
        return (
            f"{self.class_path}: {where} is a {type(result).__name__}; an output is None, "
            "a dict, an Emit, or an iterable of dicts and Emits"
        )


def normalise_outputs(
    result: Any, *, descriptor: StreamletDescriptor, input_key: str | None
) -> list[RoutedOutput]:
    """One-off :meth:`OutputRouter.route`; hot loops should keep a router instead."""
    return OutputRouter(descriptor).route(result, input_key=input_key)


def _key_function(descriptor: StreamletDescriptor, attribute: str) -> KeyFunction | None:
    port = getattr(descriptor.cls, attribute, None)
    return port.key if isinstance(port, Outlet) else None


def _checked_key(key: Any, outlet: str, source: str) -> str | None:
    if key is None or isinstance(key, str):
        return key
    raise OutputError(
        f"{source} gave outlet {outlet!r} the key {key!r} ({type(key).__name__}); "
        "keys are strings or None: convert it with str()"
    )
