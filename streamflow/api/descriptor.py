"""Inspecting a streamlet class: its descriptor, and what is wrong with its declarations.

Declarations are collected lazily, not at class creation, so a class with a
broken declaration still imports, and ``describe`` and the verifier can name
exactly which declaration is broken instead of showing a traceback. Finding a
class by its path, from trusted places only, is :mod:`streamflow.api.classpath`'s
job; its names are re-exported here.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

from streamflow.api import params as params_mod
from streamflow.api.classpath import ClassLoadError, load_streamlet_class
from streamflow.api.ports import ControlInlet, Inlet, Outlet, Port, PortKind
from streamflow.api.streamlet import Logic, Shape, Streamlet

__all__ = [
    "ClassLoadError",
    "DeclarationError",
    "ParamDescriptor",
    "PortDescriptor",
    "StreamletDescriptor",
    "describe",
    "is_dns_label",
    "load_streamlet_class",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_dns_label(name: str) -> bool:
    return bool(_DNS_LABEL.match(name))


class DeclarationError(Exception):
    """A streamlet class whose declarations are broken; ``problems`` names each one."""

    def __init__(self, class_path: str, problems: list[str]) -> None:
        super().__init__(f"{class_path}: " + "; ".join(problems))
        self.class_path = class_path
        self.problems = problems


@dataclass(frozen=True)
class PortDescriptor:
    name: str
    kind: PortKind
    schema: str
    attribute: str
    description: str = ""
    keyed: bool = False
    optional: bool = False  # an outlet that need not be connected (verify says nothing)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "schema": self.schema,
            "description": self.description,
            **({"keyed": True} if self.keyed else {}),
            **({"optional": True} if self.optional else {}),
        }


@dataclass(frozen=True)
class ParamDescriptor:
    name: str
    type: str
    required: bool
    default: Any
    description: str
    constraints: dict[str, Any]
    param: params_mod.Param[Any] = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "description": self.description,
        }
        if not self.required:
            out["default"] = self.default
        if self.constraints:
            out["constraints"] = self.constraints
        return out


@dataclass(frozen=True)
class StreamletDescriptor:
    """Everything about a streamlet class that can be known without running it."""

    class_path: str
    description: str
    inlets: tuple[PortDescriptor, ...]
    outlets: tuple[PortDescriptor, ...]
    control_inlets: tuple[PortDescriptor, ...]
    params: tuple[ParamDescriptor, ...]
    logic: Logic
    is_async: bool
    cls: type[Streamlet] = field(repr=False, compare=False)
    #: It keeps durable state (``self.state``): one store per partition of each data inlet.
    stateful: bool = False
    #: The outlet ``process_columns`` writes (its logic is PROCESS_COLUMNS), else "".
    columns_outlet: str = ""
    #: Data inlets whose batches the runtime decodes as columns too (``columns_of``).
    column_inlets: tuple[str, ...] = ()
    #: The most replicas it can run as (None: any).
    max_replicas: int | None = None

    @property
    def shape(self) -> Shape:
        return Shape.of(len(self.inlets), len(self.outlets))

    def port(self, name: str) -> PortDescriptor | None:
        for port in (*self.inlets, *self.control_inlets, *self.outlets):
            if port.name == name:
                return port
        return None

    def param(self, name: str) -> ParamDescriptor | None:
        return next((p for p in self.params if p.name == name), None)

    def port_names(self) -> list[str]:
        return [p.name for p in (*self.inlets, *self.control_inlets, *self.outlets)]

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.class_path,
            "description": self.description,
            "shape": self.shape.value,
            "logic": self.logic.value,
            "async": self.is_async,
            "stateful": self.stateful,
            **({"columns_outlet": self.columns_outlet} if self.columns_outlet else {}),
            **({"column_inlets": list(self.column_inlets)} if self.column_inlets else {}),
            "inlets": [p.to_json() for p in self.inlets],
            "control_inlets": [p.to_json() for p in self.control_inlets],
            "outlets": [p.to_json() for p in self.outlets],
            "params": [p.to_json() for p in self.params],
        }


def describe(cls: type[Streamlet], *, class_path: str | None = None) -> StreamletDescriptor:
    """The descriptor of a streamlet class; :class:`DeclarationError` lists broken declarations."""
    path = class_path or f"{cls.__module__}:{cls.__qualname__}"
    problems: list[str] = []
    ports = _collect(cls, Port)
    declared_params = _collect(cls, params_mod.Param)
    _check_ports(ports, problems)
    param_descriptors = _check_params(declared_params, problems)
    inlets = tuple(_port(a, p) for a, p in ports if type(p) is Inlet or (isinstance(p, Inlet)))
    controls = tuple(_port(a, p) for a, p in ports if isinstance(p, ControlInlet))
    outlets = tuple(_port(a, p) for a, p in ports if isinstance(p, Outlet))
    logic, is_async = _logic(cls, bool(inlets), problems)
    if not (inlets or outlets or controls):
        problems.append("declares no ports: add an Inlet or an Outlet")
    stateful = bool(getattr(cls, "stateful", False))
    if stateful and not inlets:
        problems.append(
            "is stateful but has no data inlet: state is kept per input partition, "
            "so only a streamlet that reads one can keep it"
        )
    columns_outlet = ""
    if logic is Logic.PROCESS_COLUMNS:
        columns_outlet = _columns_outlet(cls, inlets, outlets, stateful, problems)
    column_inlets = _column_inlets(cls, inlets, logic, problems)
    if problems or logic is None:  # no logic always comes with a problem that says why
        raise DeclarationError(path, problems)
    doc = cls.description or inspect.getdoc(cls) or ""
    if cls.__doc__ is None and doc == inspect.getdoc(Streamlet):
        doc = ""
    return StreamletDescriptor(
        class_path=path,
        description=doc,
        inlets=inlets,
        outlets=outlets,
        control_inlets=controls,
        params=param_descriptors,
        logic=logic,
        is_async=is_async,
        cls=cls,
        stateful=stateful,
        columns_outlet=columns_outlet,
        column_inlets=column_inlets,
        max_replicas=getattr(cls, "max_replicas", None),
    )


def _collect(cls: type, kind: type) -> list[tuple[str, Any]]:
    """Declared attributes of ``kind`` in definition order, base classes first."""
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            if isinstance(value, kind):
                seen[attribute] = value
    return list(seen.items())


def _port(attribute: str, port: Port) -> PortDescriptor:
    return PortDescriptor(
        name=port.name,
        kind=port.kind,
        schema=port.schema,
        attribute=attribute,
        description=port.description,
        keyed=isinstance(port, Outlet) and port.key is not None,
        optional=isinstance(port, Outlet) and port.optional,
    )


def _check_ports(ports: list[tuple[str, Port]], problems: list[str]) -> None:
    seen: dict[str, str] = {}
    for attribute, port in ports:
        if isinstance(port, Inlet) and isinstance(port, ControlInlet):  # pragma: no cover
            continue
        label = f"{type(port).__name__} {attribute}"
        if not port.name:
            problems.append(f"{label} has no name")
        elif not is_dns_label(port.name):
            problems.append(
                f"{label}: port name {port.name!r} is not a DNS label "
                "(lowercase letters, digits and '-', at most 63)"
            )
        if not port.schema:
            problems.append(f"{label} has no schema: give the schema's full name")
        if port.name in seen:
            problems.append(f"{label}: port name {port.name!r} is also used by {seen[port.name]}")
        seen[port.name] = label
        if isinstance(port, Outlet) and port.key is not None and not callable(port.key):
            problems.append(f"{label}: key must be a function of the record")


def _check_params(
    declared: list[tuple[str, params_mod.Param[Any]]], problems: list[str]
) -> tuple[ParamDescriptor, ...]:
    out = []
    seen: set[str] = set()
    for attribute, param in declared:
        if param.name in seen:
            problems.append(f"parameter {attribute}: name {param.name!r} is declared twice")
        seen.add(param.name)
        problem = param.default_problem()
        if problem:
            problems.append(f"parameter {attribute}: {problem}")
            continue
        default = None if param.required else param.to_json(param.parse(param.default))
        out.append(
            ParamDescriptor(
                name=param.name,
                type=param.type_name,
                required=param.required,
                default=default,
                description=param.description,
                constraints=param.constraints(),
                param=param,
            )
        )
    return tuple(out)


def _column_inlets(
    cls: type[Streamlet],
    inlets: tuple[PortDescriptor, ...],
    logic: Logic | None,
    problems: list[str],
) -> tuple[str, ...]:
    """The data inlets ``column_inlets`` names (:func:`streamflow.api.columns.columns_of`)."""
    named = getattr(cls, "column_inlets", ())
    if not isinstance(named, tuple | list) or not all(isinstance(n, str) for n in named):
        problems.append("column_inlets must be a tuple of inlet names, e.g. ('in',)")
        return ()
    if named and logic is Logic.PROCESS_COLUMNS:
        problems.append("column_inlets is for process_batch: process_columns reads columns")
        return ()
    data = {p.name for p in inlets}
    for name in named:
        if name not in data:
            problems.append(
                f"column_inlets names {name!r}, which is not one of the streamlet's data "
                f"inlets ({', '.join(sorted(data)) or 'it has none'})"
            )
    return tuple(dict.fromkeys(named))


def _columns_outlet(
    cls: type,
    inlets: tuple[PortDescriptor, ...],
    outlets: tuple[PortDescriptor, ...],
    stateful: bool,
    problems: list[str],
) -> str:
    """The outlet process_columns writes: one row out per row of its one inlet, on the
    outlet ``columns_outlet`` names (default: the only one). Other outlets take what the
    streamlet writes outside its batches (control reactions, ``between_batches``)."""
    if len(inlets) != 1:
        problems.append(
            "process_columns needs exactly one inlet (it returns one output row per input "
            "row); use process_batch for other shapes"
        )
    if stateful:
        problems.append("process_columns does not keep state stores: use process_batch")
    named = getattr(cls, "columns_outlet", "")
    if not named and len(outlets) != 1:
        problems.append(
            "process_columns writes one outlet: name it with columns_outlet = '...' "
            f"(this streamlet has {len(outlets)})"
        )
        return ""
    outlet = next((p for p in outlets if p.name == named), None) if named else outlets[0]
    if outlet is None:
        problems.append(f"columns_outlet {named!r} is not one of the streamlet's outlets")
        return ""
    if outlet.keyed:
        problems.append(
            f"process_columns keeps each input's key: outlet {outlet.name!r} may not "
            "set a key function"
        )
    return outlet.name


def _logic(cls: type, has_inlets: bool, problems: list[str]) -> tuple[Logic | None, bool]:
    if not has_inlets:
        serve = getattr(cls, Logic.SERVE, None)
        if serve is not None:
            if not inspect.iscoroutinefunction(serve):
                problems.append("serve() must be an async method (async def serve(self, emitter))")
            return Logic.SERVE, True
        source = getattr(cls, Logic.SOURCE, None)
        if source is None:
            problems.append("an ingress (no inlets) needs a source() or serve() method")
            return None, False
        asynchronous = inspect.isasyncgenfunction(source) or inspect.iscoroutinefunction(source)
        return Logic.SOURCE, asynchronous
    for logic in (Logic.PROCESS_COLUMNS, Logic.PROCESS_BATCH, Logic.PROCESS):
        method = getattr(cls, logic, None)
        if method is not None:
            if not callable(method):
                problems.append(f"{logic} must be a method")
            return logic, inspect.iscoroutinefunction(method)
    problems.append("declares inlets but none of process(), process_batch() or process_columns()")
    return None, False
