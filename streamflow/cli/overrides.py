"""``--set streamlet.param=value`` and ``--conf FILE``: config given at deploy time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from streamflow.api.params import parse_duration

__all__ = ["OverrideError", "collect", "duration_seconds"]


class OverrideError(ValueError):
    """A --set or --conf value that cannot be understood."""


def collect(settings: list[str], conf: Path | None) -> dict[str, Any]:
    """``{"streamlet.param": raw}`` from a conf file, then each --set (which wins)."""
    out: dict[str, Any] = {}
    if conf is not None:
        out.update(_from_file(conf))
    for setting in settings:
        target, sep, value = setting.partition("=")
        if not sep or "." not in target:
            raise OverrideError(
                f"--set {setting!r}: expected streamlet.param=value, "
                "e.g. --set scorer.threshold=0.7"
            )
        out[target.strip()] = value
    return out


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = YAML(typ="safe").load(path.read_text())
    except YAMLError as exc:
        raise OverrideError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise OverrideError(f"{path}: expected a mapping of streamlet -> {{param: value}}")
    return {f"{s}.{p}": v for s, params in data.items() for p, v in params.items()}


def duration_seconds(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise OverrideError(str(exc)) from None
