"""What ``verify`` checks of a model-following streamlet's config, before any model exists.

The tensor mapping is parsed, then held against the ports' schemas (fields that exist,
with types that fit), and each allowlist entry looser than it looks is a warning. Each
problem names the parameter the user wrote: the shorthand when that is what they used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streamflow.api.streamlet import ConfigProblem
from streamflow.models import locations, tensors

__all__ = ["config_problems"]

Schemas = Mapping[str, Mapping[str, Any]]


def config_problems(
    config: Mapping[str, Any],
    mapping_of: Callable[[], tensors.TensorMapping],
    check_mapping: Callable[[tensors.TensorMapping, Schemas], list[tensors.SchemaProblem]],
    schemas: Schemas,
) -> list[ConfigProblem]:
    """``mapping_of`` makes the declared mapping (MappingError: it is invalid);
    ``check_mapping`` holds it against ``schemas``, the ports' by name."""
    loose = locations.config_problems(config.get("allowlist") or [])
    try:
        mapping = mapping_of()
    except tensors.MappingError as exc:
        invalid = ConfigProblem(
            "invalid-tensor-mapping",
            str(exc),
            "inputs" if config.get("inputs") else "input_fields",
            hint="inputs: {MODEL_INPUT: {field: F, dtype: float32, shape: [...]}}",
        )
        return [invalid, *loose]
    return [
        *(
            ConfigProblem(p.code, p.message, _param_of(p.param, config), p.hint, p.path)
            for p in check_mapping(mapping, schemas)
        ),
        *loose,
    ]


def _param_of(param: str, config: Mapping[str, Any]) -> str:
    """Point at the parameter the user wrote: the shorthand when that is what they used."""
    if param == "inputs" and not config.get("inputs") and config.get("input_fields"):
        return "input_fields"
    if param == "outputs" and not config.get("outputs"):
        return "class_field" if config.get("class_field") else "output_field"
    return param
