"""streamflow: schema-typed streaming ML inference over Apache Kafka.

This module is the API a streamlet author needs; everything else is reached
through its subpackages.
"""

from streamflow.api import (
    Backpressure,
    Context,
    ControlInlet,
    Emit,
    EmitError,
    Emitter,
    Inlet,
    Outlet,
    Record,
    Shape,
    Streamlet,
    params,
)

__all__ = [
    "Backpressure",
    "Context",
    "ControlInlet",
    "Emit",
    "EmitError",
    "Emitter",
    "Inlet",
    "Outlet",
    "Record",
    "Shape",
    "Streamlet",
    "params",
]

__version__ = "0.1.0"
