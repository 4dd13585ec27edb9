"""An in-memory harness that runs a streamlet through the runtime's own loops.

A unit test should predict what the deployed streamlet writes, without Kafka.
So the harness runs the runtime's :class:`~streamflow.runtime.processor.Processor`,
control reader and source runner themselves, over Kafka in memory (see
:mod:`streamflow.testkit.engine`): calling the logic, routing its outputs,
dead-lettering and backpressure are the runtime's code, not a copy of it.

* config is parsed by the same :func:`~streamflow.api.config.parse_config`
  (durations become ``timedelta``, defaults are filled, bad values raise
  :class:`~streamflow.api.config.ConfigError` listing every problem);
* every value crosses each port through the real Avro single-object codec,
  both ways, and is also checked strictly (no unknown fields), so a schema
  mistake fails the unit test with the port and the field named;
* an output is ``None``, a dict (for the only outlet), an ``Emit`` (for a
  named outlet), or an iterable of those. Its key is the ``Emit``'s explicit
  key, else the outlet's key function, else the input record's key (``None``
  for an ingress);
* ``process`` runs per record (``async`` ones concurrently within a batch);
  ``process_batch`` gets batches of ``batch_size`` and must return one result
  per input. When a batch raises, it is re-run record by record to isolate the
  poison record;
* a record whose logic raises, or that does not decode, becomes a
  :class:`DeadLetter` and the rest carry on, as on the dead-letter topic.
  Control records are applied between batches, and a failing one is a dead
  letter too. Mistakes in the streamlet's *contract* (an output that does not
  fit its outlet's schema, a dict for a streamlet with several outlets, a
  ``process_batch`` result of the wrong length) raise instead: the runtime
  dead-letters every record for them, which a test should not hide;
* a :class:`~streamflow.api.streamlet.Backpressure` rewinds the batch, as in
  the runtime: nothing of it is written, the records stay :attr:`pending`, and
  :attr:`backpressure` says why. The next :meth:`run` retries them (the
  runtime waits ``retry_after`` first; the harness's clock moves instead).

The harness is synchronous and owns one event loop, like a runtime replica,
so ``async`` setup, logic and sources need no test plugin.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from confluent_kafka import Message

from streamflow.api import aio
from streamflow.api import config as config_mod
from streamflow.api.descriptor import StreamletDescriptor, describe
from streamflow.api.outputs import OutputError, RoutedOutput
from streamflow.api.ports import PortKind
from streamflow.api.streamlet import Context, Logic, Streamlet
from streamflow.runtime.metrics import Metrics
from streamflow.schema.codecs import DecodeError, EncodeError
from streamflow.schema.store import SchemaStore
from streamflow.testkit.engine import EXHAUSTED, Engine
from streamflow.testkit.ports import HarnessError, PortCodec, port_codecs

__all__ = ["DeadLetter", "StreamletHarness"]

T = TypeVar("T")

_EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z: fed records get a fake, steady clock


@dataclass(frozen=True)
class DeadLetter:
    """An input the streamlet could not handle, as the dead-letter topic would get it."""

    inlet: str
    key: str | None
    value: dict[str, Any] | None  # the decoded input; None when it did not decode
    data: bytes  # the input exactly as it arrived
    error: str  # "TypeName: message", as in the streamflow-error header
    kind: str  # "decode", "logic" or "control"
    exception: BaseException = field(repr=False, compare=False)


class StreamletHarness:
    """Runs one streamlet class in memory. See the module docstring for the semantics."""

    def __init__(
        self,
        streamlet: type[Streamlet],
        *,
        config: Mapping[str, Any] | None = None,
        schema_paths: Iterable[str | Path] = (),
        store: SchemaStore | None = None,
        batch_size: int = 100,
        strict: bool = True,
        app: str = "test",
        name: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise HarnessError(f"batch_size must be at least 1, got {batch_size}")
        self.descriptor: StreamletDescriptor = describe(streamlet)
        self.store = store if store is not None else SchemaStore(schema_paths)
        self._codecs: dict[str, PortCodec] = port_codecs(self.descriptor, self.store, strict=strict)
        self.config = config_mod.parse_config(self.descriptor, config)
        self.streamlet: Streamlet = streamlet(self.config)
        name = name or streamlet.__name__.lower()
        self.context = Context(
            app=app,
            streamlet=name,
            replica=0,
            config=self.config,
            logger=logging.getLogger(f"streamflow.streamlet.{name}"),
            schema_store=self.store,  # as the runtime does
        )
        self.streamlet.context = self.context
        self.batch_size = batch_size
        self.dead_letters: list[DeadLetter] = []
        self._outputs: list[RoutedOutput] = []
        self._broken: list[BaseException] = []  # contract mistakes, raised after the turn
        self._clock_ms = _EPOCH_MS
        self._loop = asyncio.new_event_loop()
        self._engine = Engine(
            streamlet=self.streamlet,
            descriptor=self.descriptor,
            codecs=self._codecs,
            batch_size=batch_size,
            loop=self._loop,
            on_dead_letter=self._dead_lettered,
            app=app,
            name=name,
        )
        self._source: Iterator[Any] | AsyncIterator[Any] | None = None
        self._state = "new"
        self._again: Callable[[], StreamletHarness] = functools.partial(
            StreamletHarness,
            streamlet,
            config=config,
            store=self.store,
            batch_size=batch_size,
            strict=strict,
            app=app,
            name=name,
        )

    # -- lifecycle -----------------------------------------------------------

    def setup(self) -> None:
        """Call the streamlet's ``setup(context)``. Runs once; feeding runs it if needed."""
        if self._state == "closed":
            raise HarnessError("the harness was torn down; create a new one")
        if self._state == "new":
            self._state = "setting-up"
            aio.call_maybe_async(self.streamlet.setup, self.context, loop=self._loop)
            self._state = "running"

    def teardown(self) -> None:
        """Close the source, call ``teardown()``, and close the event loop. Runs once."""
        if self._state == "closed":
            return
        try:
            if self._source is not None:
                aio.close_source(self._source, loop=self._loop)
            if self._state == "running":
                try:
                    aio.call_maybe_async(self.streamlet.teardown, loop=self._loop)
                finally:  # as the runtime: what the streamlet registered with on_close
                    self._loop.run_until_complete(self.context.aclose())
        finally:
            self._state = "closed"
            self._engine.close()
            self._loop.close()

    def restarted(self) -> StreamletHarness:
        """A new harness of this streamlet and config, whose state (``stateful = True``) is
        restored from this one's changelog, as a replica started on another machine
        restores it; nothing fed here is fed there. Control records are not carried over:
        send them again, as a replica would replay its control topics.
        """
        if self.state_changelog() is None:
            raise HarnessError(f"{self.descriptor.class_path} keeps no state to restart with")
        again = self._again()
        for msg in self.state_changelog() or []:
            again._engine.broker.append(
                msg.topic(),  # type: ignore[arg-type]
                msg.value(),
                msg.key(),
                partition=msg.partition(),
            )
        return again

    def state_changelog(self) -> list[Message] | None:
        """What a stateful streamlet wrote to its changelog topics so far; None if stateless."""
        if not self.descriptor.stateful:
            return None
        broker = self._engine.broker
        return [
            m for t in sorted(broker.topics) if t.endswith(".changelog") for m in broker.records(t)
        ]

    def __enter__(self) -> StreamletHarness:
        self.setup()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.teardown()

    # -- inputs --------------------------------------------------------------

    def feed(
        self,
        inlet: str,
        values: Any,
        *,
        key: str | None = None,
        keys: Sequence[str | None] | None = None,
        timestamp_ms: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> None:
        """Queue records for a data inlet: a dict, raw ``bytes``, or a list of those.

        Raw bytes go in undecoded, to test what happens to a record that is not
        valid for the inlet's schema. ``keys`` gives one key per value; ``headers``
        go on every record.
        """
        codec = self._port(inlet, kinds=(PortKind.INLET,))
        extra = [(k, v.encode() if isinstance(v, str) else v) for k, v in (headers or {}).items()]
        for value, record_key in self._with_keys(values, key, keys):
            data = value if isinstance(value, bytes) else codec.encode(value, what="a fed value")
            self._engine.write(
                inlet,
                data,
                record_key,
                codec.port.schema,
                self._tick(timestamp_ms),
                headers=extra,
            )

    def control(
        self,
        inlet: str,
        values: Any,
        *,
        key: str | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> list[RoutedOutput]:
        """Apply control records now (between batches, as the runtime does); their outputs."""
        codec = self._port(inlet, kinds=(PortKind.CONTROL_INLET,))
        self.setup()
        for value, record_key in self._with_keys(values, key, keys):
            data = (
                value if isinstance(value, bytes) else codec.encode(value, what="a control value")
            )
            self._engine.write(inlet, data, record_key, codec.port.schema, self._tick(None))
        self._engine.apply_control()
        return self._collect()

    @property
    def pending(self) -> int:
        """Fed records not yet processed (``accepts_data()`` or a backpressure may hold them)."""
        return self._engine.pending

    @property
    def backpressure(self) -> str | None:
        """Why the last batch was handed back with ``Backpressure``, while it waits; or None."""
        return self._engine.backing_off

    # -- running -------------------------------------------------------------

    def run(self) -> list[RoutedOutput]:
        """Process everything fed so far, in batches; the outputs it produced.

        Records stay pending while the streamlet's ``accepts_data()`` is False,
        just as the runtime holds consumption (until a first model arrives, say),
        and after a ``Backpressure`` until the next ``run()``.
        """
        if not self.descriptor.inlets:
            raise HarnessError(f"{self.descriptor.class_path} has no inlets; use run_source()")
        self.setup()
        produced: list[RoutedOutput] = []

        def collect() -> None:
            produced.extend(self._collect())

        self._engine.run(collect)
        return produced

    def between_batches(self) -> list[RoutedOutput]:
        """Run the streamlet's between-batches hook (a model swap, say), as the runtime
        does before every batch; the outputs it produced."""
        self.setup()
        self._engine.between_batches()
        return self._collect()

    def process(
        self, value: Any, *, inlet: str | None = None, key: str | None = None
    ) -> list[RoutedOutput]:
        """Feed one value (to the only inlet unless ``inlet`` is given) and run."""
        if inlet is None:
            inlet = self._only("inlet", [p.name for p in self.descriptor.inlets])
        self.feed(inlet, value, key=key)
        return self.run()

    def run_source(self, *, limit: int, timeout: float = 5.0) -> list[RoutedOutput]:
        """Pull up to ``limit`` items from ``source()``, continuing where the last call stopped.

        ``timeout`` bounds the wait for each item of an async source.
        """
        if self.descriptor.logic != Logic.SOURCE:
            raise HarnessError(f"{self.descriptor.class_path} has no source(); feed it and run()")
        self.setup()
        if self._source is None:
            self._source = aio.open_source(getattr(self.streamlet, "source")())  # noqa: B009
        source = self._source

        def next_item() -> Any:
            try:
                return aio.next_item(source, loop=self._loop, timeout=timeout)
            except aio.SourceExhausted:
                return EXHAUSTED

        self._engine.emit_source_items(next_item, limit)
        return self._collect()

    def serve(self, scenario: Callable[[], Awaitable[T]], *, timeout: float = 30.0) -> T:
        """Run ``serve(emitter)`` while ``scenario()`` runs beside it; the scenario's result.

        The emitter is the runtime's, over Kafka in memory: ``emit`` returns once the
        record is acknowledged, and an output that does not fit its outlet raises. The
        scenario drives the ingress (HTTP requests to it, say); when it returns, ``serve``
        is cancelled as on SIGTERM. What was emitted is in :meth:`outputs`.
        """
        if self.descriptor.logic != Logic.SERVE:
            raise HarnessError(f"{self.descriptor.class_path} has no serve()")
        self.setup()
        result = self._engine.serve(scenario, timeout=timeout)
        self._collect()
        return result

    # -- outputs -------------------------------------------------------------

    def outputs(self, outlet: str | None = None) -> list[tuple[str | None, dict[str, Any]]]:
        """``(key, value)`` of everything written to ``outlet`` (the only outlet by default)."""
        name = self._outlet_name(outlet)
        return [(o.key, o.value) for o in self._outputs if o.outlet == name]

    def values(self, outlet: str | None = None) -> list[dict[str, Any]]:
        """The values written to ``outlet``, without keys."""
        return [value for _, value in self.outputs(outlet)]

    @property
    def all_outputs(self) -> list[RoutedOutput]:
        """Every output in the order written, across outlets."""
        return list(self._outputs)

    @property
    def metrics(self) -> Metrics:
        """The runtime's metrics of this streamlet, as its replica serves them on /metrics:
        ``generate_latest(h.metrics.registry)``. Its own metrics are exported after each turn."""
        return self._engine.metrics

    @property
    def state(self) -> dict[str, str]:
        """What the streamlet published with ``context.set_state``."""
        return dict(self.context.state)

    def clear(self) -> None:
        """Forget the outputs and dead letters collected so far."""
        self._outputs.clear()
        self.dead_letters.clear()

    # -- internals -----------------------------------------------------------

    def _collect(self) -> list[RoutedOutput]:
        """The outputs written since the last call; a contract mistake is raised here."""
        if self._broken:
            broken, self._broken = self._broken[0], []
            raise broken
        written = self._engine.new_outputs()
        self._outputs += written
        return written

    def _dead_lettered(self, msg: Message, inlet: str, exc: BaseException, kind: str) -> None:
        if kind == "encode" or isinstance(exc, OutputError | EncodeError):
            self._broken.append(exc)  # the streamlet's contract, not the record, is wrong
            return
        data = msg.value() or b""
        value: dict[str, Any] | None = None
        if not isinstance(exc, DecodeError):
            try:
                value = self._codecs[inlet].codec.decode(data)
            except DecodeError:
                value = None
        key = msg.key()
        self.context.logger.warning("dead letter from %s: %s", inlet, exc)
        self.dead_letters.append(
            DeadLetter(
                inlet,
                key.decode("utf-8", "replace") if key is not None else None,
                value,
                data,
                f"{type(exc).__name__}: {exc}",
                kind,
                exc,
            )
        )

    def _port(self, name: str, *, kinds: tuple[PortKind, ...]) -> PortCodec:
        codec = self._codecs.get(name)
        if codec is None or codec.port.kind not in kinds:
            names = [n for n, c in self._codecs.items() if c.port.kind in kinds]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise HarnessError(
                f"{self.descriptor.class_path} has no {kinds[0]} {name!r} "
                f"({hint}{kinds[0]}s: {', '.join(names) or 'none'})"
            )
        return codec

    def _outlet_name(self, outlet: str | None) -> str:
        if outlet is None:
            return self._only("outlet", [p.name for p in self.descriptor.outlets])
        return self._port(outlet, kinds=(PortKind.OUTLET,)).port.name

    def _only(self, kind: str, names: list[str]) -> str:
        if len(names) == 1:
            return names[0]
        raise HarnessError(
            f"{self.descriptor.class_path} has {len(names)} {kind}s "
            f"({', '.join(names) or 'none'}); name the {kind}"
        )

    def _with_keys(
        self, values: Any, key: str | None, keys: Sequence[str | None] | None
    ) -> list[tuple[Any, str | None]]:
        if isinstance(values, dict | bytes):
            items = [values]
        elif isinstance(values, Iterable) and not isinstance(values, str):
            items = list(values)
        else:
            raise HarnessError(
                f"feed a dict, bytes, or a list of those, not a {type(values).__name__}"
            )
        if keys is None:
            return [(value, key) for value in items]
        if key is not None:
            raise HarnessError("give either key= (one key for all) or keys= (one per value)")
        if len(keys) != len(items):
            raise HarnessError(f"{len(keys)} keys for {len(items)} values; give one key per value")
        return list(zip(items, keys, strict=True))

    def _tick(self, timestamp_ms: int | None) -> int:
        self._clock_ms += 1
        return self._clock_ms if timestamp_ms is None else timestamp_ms
