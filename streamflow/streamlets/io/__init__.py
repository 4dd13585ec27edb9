"""Built-in I/O streamlets: records into Kafka from a generator, a file or HTTP, and out
of Kafka to a file or the console.

Why they are generic, and how to bind them
------------------------------------------
A streamlet's port schemas are static class attributes, so that ``streamflow
verify`` checks a blueprint without running anything. A built-in that works
for *any* schema therefore declares its port without one, and is bound to a
schema by a two-line subclass that redeclares the port::

    from streamflow import Outlet
    from streamflow.streamlets.io import Generator

    class WineFeed(Generator):
        out = Outlet("out", "examples.wine.WineSample")

Ingresses bind ``out``; egresses bind ``in_`` (``Inlet("in", ...)``, since ``in``
is a Python keyword). ``for_schema`` writes the subclass for you::

    WineFeed = Generator.for_schema("examples.wine.WineSample", name="WineFeed")

A blueprint references a class by ``module:Name``, so assign the result to a
module-level name, and pass that name as ``name`` so the class knows it. The
generic bases themselves do not ``describe()`` (their ports have no schema),
which is how the verifier tells a user who forgot to bind one.

At run time a built-in needs the schema itself (to synthesise, type CSV cells
or validate JSON). The runtime passes its schema store as
``context.schema_store``; without it, the built-in schemas and the
project's ``schemas/`` directory are searched.

The streamlets
--------------
* :class:`Generator`: a paced stream from a JSONL/CSV dataset, or synthesised;
* :class:`FileIngress`: a JSONL/CSV file, read once or followed (``tail -f``);
* :class:`HttpIngress`: JSON records posted over HTTP, acknowledged by Kafka;
* :class:`FileEgress`: records appended to a JSONL file, flushed per batch;
* :class:`ConsoleEgress`: records printed as JSON.
"""

from typing import TYPE_CHECKING, Any

from streamflow.streamlets.io.console import ConsoleEgress
from streamflow.streamlets.io.files import FileEgress, FileIngress
from streamflow.streamlets.io.generator import Generator
from streamflow.streamlets.io.synth import Synthesiser

if TYPE_CHECKING:
    from streamflow.streamlets.io.http import HttpIngress

__all__ = [
    "ConsoleEgress",
    "FileEgress",
    "FileIngress",
    "Generator",
    "HttpIngress",
    "Synthesiser",
]


def __getattr__(name: str) -> Any:
    """``HttpIngress`` on first use: its server (uvicorn) is a tenth of a second of
    every replica's start that imports this package only for a file or a generator."""
    if name == "HttpIngress":
        from streamflow.streamlets.io.http import HttpIngress

        globals()[name] = HttpIngress  # from now on an attribute like the others
        return HttpIngress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
