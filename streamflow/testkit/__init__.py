"""Unit-test a streamlet's logic without Kafka.

::

    from streamflow.testkit import StreamletHarness

    with StreamletHarness(Scorer, config={"threshold": 0.7}, schema_paths=["schemas"]) as h:
        h.feed("in", [{"id": "a", "x": 1.0}], keys=["a"])
        h.run()
        assert h.outputs("scores") == [("a", {"id": "a", "score": 0.9})]

Values cross every port through the real Avro codecs, so schema mistakes fail
the unit test; see :mod:`streamflow.testkit.harness` for the exact semantics.
"""

from streamflow.api.config import ConfigError
from streamflow.api.outputs import OutputError, RoutedOutput
from streamflow.schema.codecs import EncodeError
from streamflow.testkit.harness import DeadLetter, StreamletHarness
from streamflow.testkit.ports import HarnessError

__all__ = [
    "ConfigError",
    "DeadLetter",
    "EncodeError",
    "HarnessError",
    "OutputError",
    "RoutedOutput",
    "StreamletHarness",
]
