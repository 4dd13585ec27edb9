"""Turning a raw config mapping into a streamlet's typed parameter values.

The blueprint, ``--set`` strings, the operator's ConfigMap and the testkit all
hand a streamlet its config as a plain mapping. One function turns that into
the typed values (durations become ``timedelta``, defaults are filled in) that
``Streamlet(config)`` stores, so a parameter reads the same everywhere.

Every problem is collected before anything raises: a user fixing a config
wants the whole list, not one error per attempt.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from streamflow.api.descriptor import ParamDescriptor, StreamletDescriptor

__all__ = ["ConfigError", "config_problems", "parse_config"]


class ConfigError(ValueError):
    """A config that does not fit a streamlet's parameters; ``problems`` lists each one."""

    def __init__(self, class_path: str, problems: list[str]) -> None:
        super().__init__(f"invalid config for {class_path}: " + "; ".join(problems))
        self.class_path = class_path
        self.problems = problems


def parse_config(
    descriptor: StreamletDescriptor, raw: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every parameter's typed value, by name; :class:`ConfigError` lists what is wrong."""
    values, problems = _parse(descriptor, raw or {})
    if problems:
        raise ConfigError(descriptor.class_path, problems)
    return values


def config_problems(descriptor: StreamletDescriptor, raw: Mapping[str, Any] | None) -> list[str]:
    """What :func:`parse_config` would complain about; empty when the config is valid."""
    return _parse(descriptor, raw or {})[1]


def _parse(
    descriptor: StreamletDescriptor, raw: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    problems = [_unknown(name, descriptor) for name in raw if descriptor.param(name) is None]
    for param in descriptor.params:
        if param.name in raw:
            source = raw[param.name]
        elif param.required:
            problems.append(_missing(param))
            continue
        else:
            source = param.param.default
        try:
            values[param.name] = param.param.parse(source)
        except ValueError as exc:
            problems.append(f"{param.name}: {exc}")
    return values, problems


def _unknown(name: str, descriptor: StreamletDescriptor) -> str:
    known = [p.name for p in descriptor.params]
    if not known:
        return f"unknown parameter {name!r}: this streamlet takes no parameters"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown parameter {name!r} ({hint}parameters: {', '.join(known)})"


def _missing(param: ParamDescriptor) -> str:
    about = f": {param.description}" if param.description else ""
    return f"missing required parameter {param.name!r} ({param.type}){about}"
