"""Built-in streamlets, ready to use in a blueprint or to subclass.

* :mod:`streamflow.streamlets.io`: getting records in and out (generator, files,
  HTTP, console).

Streamlets sit above the runtime and the schema layer and use only their public
API, exactly as a user's streamlets do.
"""

__all__: list[str] = []
