"""An in-memory harness that runs a streamlet's logic the way the runtime does.

A unit test should predict what the deployed streamlet writes, without Kafka.
So the harness does what the runtime does, minus the broker:

* config is parsed by the same :func:`~streamflow.api.config.parse_config`
  (durations become ``timedelta``, defaults are filled, bad values raise
  :class:`~streamflow.api.config.ConfigError` listing every problem);
* every value crosses each port through the real Avro single-object codec,
  both ways, and is also checked strictly (no unknown fields), so a schema
  mistake fails the unit test with the port and the field named;
* results are routed by the shared :class:`~streamflow.api.outputs.OutputRouter`.
  An output is ``None``, a dict (for the only outlet), an ``Emit`` (for a
  named outlet), or an iterable of those. Its key is the ``Emit``'s explicit
  key, else the outlet's key function, else the input record's key (``None``
  for an ingress);
* ``process`` runs per record (``async`` ones concurrently within a batch);
  ``process_batch`` gets batches of ``batch_size`` and must return one result
  per input. When a batch raises, it is re-run record by record to isolate the
  poison record;
* a record whose logic raises, or that does not decode, becomes a
  :class:`DeadLetter` and the rest carry on, as with the runtime's dead-letter
  topic. Control records are applied between batches, and a failing one is a
  dead letter too. Mistakes in the streamlet's *contract* (an output that does
  not fit its outlet's schema, a dict for a streamlet with several outlets, a
  ``process_batch`` result of the wrong length) raise instead: the runtime
  would dead-letter every record for them, which a test should not hide.

The harness is synchronous and owns one event loop, like a runtime replica,
so ``async`` setup, logic and sources need no test plugin.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from streamflow.api import aio, outputs
from streamflow.api import config as config_mod
from streamflow.api.descriptor import StreamletDescriptor, describe
from streamflow.api.outputs import RoutedOutput
from streamflow.api.streamlet import Context, Record, Streamlet
from streamflow.schema.codecs import DecodeError
from streamflow.schema.store import SchemaStore
from streamflow.testkit import logic as logic_mod
from streamflow.testkit.ports import HarnessError, PortCodec, port_codecs

__all__ = ["DeadLetter", "StreamletHarness"]

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


@dataclass(frozen=True)
class _Pending:
    inlet: str
    key: str | None
    data: bytes
    timestamp_ms: int


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
        self.context = Context(
            app=app,
            streamlet=name or streamlet.__name__.lower(),
            replica=0,
            config=self.config,
            logger=logging.getLogger(f"streamflow.streamlet.{name or streamlet.__name__}"),
        )
        self.context.extras["schema_store"] = self.store  # as the runtime does
        self.streamlet.context = self.context
        self.batch_size = batch_size
        self.dead_letters: list[DeadLetter] = []
        self._router = outputs.OutputRouter(self.descriptor)
        self._outputs: list[RoutedOutput] = []
        self._pending: list[_Pending] = []
        self._offsets: dict[str, int] = {}
        self._clock_ms = _EPOCH_MS
        self._loop = asyncio.new_event_loop()
        self._logic = logic_mod.LogicCaller(
            streamlet=self.streamlet,
            descriptor=self.descriptor,
            router=self._router,
            loop=self._loop,
        )
        self._source: Iterator[Any] | AsyncIterator[Any] | None = None
        self._state = "new"

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
                aio.call_maybe_async(self.streamlet.teardown, loop=self._loop)
        finally:
            self._state = "closed"
            self._loop.close()

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
    ) -> None:
        """Queue records for a data inlet: a dict, raw ``bytes``, or a list of those.

        Raw bytes go in undecoded, to test what happens to a record that is not
        valid for the inlet's schema. ``keys`` gives one key per value.
        """
        codec = self._port(inlet, kinds=("inlet",))
        for value, record_key in self._with_keys(values, key, keys):
            data = value if isinstance(value, bytes) else codec.encode(value, what="a fed value")
            self._pending.append(_Pending(inlet, record_key, data, self._tick(timestamp_ms)))

    def control(
        self,
        inlet: str,
        values: Any,
        *,
        key: str | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> list[RoutedOutput]:
        """Apply control records now (between batches, as the runtime does); their outputs."""
        codec = self._port(inlet, kinds=("control-inlet",))
        self.setup()
        produced: list[RoutedOutput] = []
        for value, record_key in self._with_keys(values, key, keys):
            data = (
                value if isinstance(value, bytes) else codec.encode(value, what="a control value")
            )
            pending = _Pending(inlet, record_key, data, self._tick(None))
            record = self._decode(pending, kind="control")
            if record is None:
                continue
            try:
                result = logic_mod.materialise(
                    aio.call_maybe_async(self.streamlet.on_control, inlet, record, loop=self._loop)
                )
            except Exception as exc:
                self._dead_letter(pending, record.value, exc, kind="control")
                continue
            produced += self._emit(result, input_key=record.key)
        return produced

    @property
    def pending(self) -> int:
        """Fed records not yet processed (``accepts_data()`` may be holding them)."""
        return len(self._pending)

    # -- running -------------------------------------------------------------

    def run(self) -> list[RoutedOutput]:
        """Process everything fed so far, in batches; the outputs it produced.

        Records stay pending while the streamlet's ``accepts_data()`` is False,
        just as the runtime holds consumption (until a first model arrives, say).
        """
        if not self.descriptor.inlets:
            raise HarnessError(f"{self.descriptor.class_path} has no inlets; use run_source()")
        self.setup()
        produced = self.between_batches()
        while self._pending and self.streamlet.accepts_data():
            batch, self._pending = (
                self._pending[: self.batch_size],
                self._pending[self.batch_size :],
            )
            produced += self._run_batch(batch)
            produced += self.between_batches()
        return produced

    def between_batches(self) -> list[RoutedOutput]:
        """Run the streamlet's between-batches hook (a model swap, say), as the runtime
        does before every batch; the outputs it produced."""
        self.setup()
        result = aio.call_maybe_async(self.streamlet.between_batches, loop=self._loop)
        return self._emit(result, input_key=None)

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
        if self.descriptor.logic != "source":
            raise HarnessError(f"{self.descriptor.class_path} has no source(); feed it and run()")
        self.setup()
        if self._source is None:
            self._source = aio.open_source(getattr(self.streamlet, "source")())  # noqa: B009
        produced: list[RoutedOutput] = []
        for _ in range(limit):
            try:
                item = aio.next_item(self._source, loop=self._loop, timeout=timeout)
            except aio.SourceExhausted:
                break
            produced += self._emit(logic_mod.materialise(item), input_key=None)
        return produced

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
    def state(self) -> dict[str, str]:
        """What the streamlet published with ``context.set_state``."""
        return dict(self.context.extras.get("state", {}))

    def clear(self) -> None:
        """Forget the outputs and dead letters collected so far."""
        self._outputs.clear()
        self.dead_letters.clear()

    # -- internals -----------------------------------------------------------

    def _run_batch(self, batch: list[_Pending]) -> list[RoutedOutput]:
        decoded = [(p, self._decode(p, kind="decode")) for p in batch]
        good = [(p, r) for p, r in decoded if r is not None]
        results = self._logic([r for _, r in good]) if good else []
        produced: list[RoutedOutput] = []
        for (pending, record), result in zip(good, results, strict=True):
            if isinstance(result, BaseException):
                self._dead_letter(pending, record.value, result, kind="logic")
            else:
                produced += self._emit(result, input_key=record.key)
        return produced

    def _emit(self, result: Any, *, input_key: str | None) -> list[RoutedOutput]:
        routed = self._router.route(result, input_key=input_key)
        written = [
            out._replace(value=self._codecs[out.outlet].round_trip(out.value, what="an output"))
            for out in routed
        ]
        self._outputs += written
        return written

    def _decode(self, pending: _Pending, *, kind: str) -> Record | None:
        codec = self._codecs[pending.inlet]
        try:
            value = codec.codec.decode(pending.data)
        except DecodeError as exc:
            self._dead_letter(pending, None, exc, kind=kind)
            return None
        offset = self._offsets.get(pending.inlet, 0)
        self._offsets[pending.inlet] = offset + 1
        return Record(
            value=value,
            key=pending.key,
            inlet=pending.inlet,
            topic=pending.inlet,
            partition=0,
            offset=offset,
            timestamp_ms=pending.timestamp_ms,
            headers={"streamflow-schema": codec.port.schema.encode()},
        )

    def _dead_letter(
        self, pending: _Pending, value: dict[str, Any] | None, exc: BaseException, *, kind: str
    ) -> None:
        self.context.logger.warning("dead letter from %s: %s", pending.inlet, exc)
        error = f"{type(exc).__name__}: {exc}"
        self.dead_letters.append(
            DeadLetter(pending.inlet, pending.key, value, pending.data, error, kind, exc)
        )

    def _port(self, name: str, *, kinds: tuple[str, ...]) -> PortCodec:
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
        return self._port(outlet, kinds=("outlet",)).port.name

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
