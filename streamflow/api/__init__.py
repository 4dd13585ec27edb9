"""What a streamlet author declares: ports, config parameters, and the base class.

This layer is pure data over :mod:`streamflow.schema`: declarations can be
inspected (by the verifier, ``describe`` and the operator) without Kafka.
"""

from streamflow.api import params
from streamflow.api.descriptor import (
    DeclarationError,
    ParamDescriptor,
    PortDescriptor,
    StreamletDescriptor,
    describe,
    load_streamlet_class,
)
from streamflow.api.ports import ControlInlet, Emit, Inlet, Outlet, Port, PortKind
from streamflow.api.state import State, StateError, Store
from streamflow.api.streamlet import (
    Backpressure,
    CloseCallback,
    ConfigProblem,
    Context,
    EmitError,
    Emitter,
    Logic,
    Record,
    Shape,
    Streamlet,
)

__all__ = [
    "Backpressure",
    "CloseCallback",
    "ConfigProblem",
    "Context",
    "ControlInlet",
    "DeclarationError",
    "Emit",
    "EmitError",
    "Emitter",
    "Inlet",
    "Logic",
    "Outlet",
    "ParamDescriptor",
    "Port",
    "PortDescriptor",
    "PortKind",
    "Record",
    "Shape",
    "State",
    "StateError",
    "Store",
    "Streamlet",
    "StreamletDescriptor",
    "describe",
    "load_streamlet_class",
    "params",
]
