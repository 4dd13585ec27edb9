"""The Streamlet base class, and the values its logic sees.

A streamlet is a class. Its ports and parameters are class attributes, and its
logic is one of three methods, sync or ``async``:

* ``process(record)`` returns zero or more outputs for one input record;
* ``process_batch(records)`` returns one result per input, in order, so that
  vectorised work (inference) sees a whole batch while keys, dead letters and
  offsets still line up with each input;
* ``source()`` (ingress only) is a generator or async generator of outputs;
* ``serve(emitter)`` (ingress only) is a coroutine that runs until cancelled
  and pushes records through an :class:`Emitter`, awaiting Kafka's
  acknowledgement of each (an HTTP ingress answers only once it is safe).

An *output* is ``None`` (nothing), a dict (a record for the only outlet), an
:class:`~streamflow.api.ports.Emit` (a record for a named outlet, with an
optional key), or an iterable of those.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from streamflow.api import own_metrics
from streamflow.api.ports import Emit
from streamflow.api.state import State, StateError

if TYPE_CHECKING:  # the store's codecs load fastavro; a streamlet's import need not
    from streamflow.schema.store import SchemaStore

__all__ = [
    "Backpressure",
    "CloseCallback",
    "ConfigProblem",
    "Context",
    "EmitError",
    "Emitter",
    "Logic",
    "Output",
    "Record",
    "Shape",
    "Streamlet",
]

Output = None | dict[str, Any] | Emit | Iterable[dict[str, Any] | Emit]

#: What :meth:`Context.on_close` takes: a function of no arguments, sync or ``async``.
CloseCallback = Callable[[], Awaitable[None] | None]


class Shape(enum.StrEnum):
    """What a streamlet looks like from its data ports (control inlets aside)."""

    INGRESS = "ingress"
    PROCESSOR = "processor"
    FAN_IN = "fan-in"
    FAN_OUT = "fan-out"
    FAN_IN_OUT = "fan-in-out"
    EGRESS = "egress"

    @classmethod
    def of(cls, inlets: int, outlets: int) -> Shape:
        if inlets == 0:
            return cls.INGRESS
        if outlets == 0:
            return cls.EGRESS
        if inlets == 1 and outlets == 1:
            return cls.PROCESSOR
        if inlets == 1:
            return cls.FAN_OUT
        return cls.FAN_IN if outlets == 1 else cls.FAN_IN_OUT


class Logic(enum.StrEnum):
    """Which of the streamlet's methods holds its logic; the value is the method's name."""

    PROCESS = "process"
    PROCESS_BATCH = "process_batch"
    PROCESS_COLUMNS = "process_columns"  # a batch as columns: streamflow.api.columns
    SOURCE = "source"
    SERVE = "serve"


class Backpressure(Exception):
    """Raised by logic when a dependency is down: retry the whole batch later.

    Nothing of the batch is written or committed; the runtime rewinds to its
    first record, keeps polling control inlets (so a new model can still
    arrive), and tries again after ``retry_after`` seconds. Records are
    neither dropped nor dead-lettered while a model server is unreachable.
    """

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EmitError(Exception):
    """An output Kafka did not acknowledge (unavailable, timed out, or rejected)."""


class Emitter(Protocol):
    """How a ``serve()`` ingress hands records to Kafka."""

    async def emit(self, output: dict[str, Any] | Emit, *, timeout: float = 10.0) -> None:
        """Returns once Kafka acknowledged every record of ``output``; else EmitError."""
        ...


class ConsumedMessage(Protocol):
    """What a record read from Kafka keeps of its message (a ``confluent_kafka.Message``)."""

    def key(self) -> bytes | str | None: ...

    def offset(self) -> int | None: ...

    def timestamp(self) -> tuple[int, int]: ...

    def headers(self) -> Any: ...  # a list of (name, value) pairs, or None


_NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})


class Record:
    """One decoded input record and where it came from. Treat it as read-only.

    One is built for every record on the hot path, so a record read from Kafka
    (:meth:`consumed`) takes its key, timestamp and headers from its message
    only when the logic first asks for them: most logic never does, and
    decoding them up front was a sixth of the runtime's own cost per record.
    """

    __slots__ = (
        "_column_row",
        "_headers",
        "_key",
        "_message",
        "_offset",
        "_timestamp_ms",
        "inlet",
        "partition",
        "topic",
        "value",
    )

    value: dict[str, Any]
    inlet: str
    topic: str
    partition: int
    _message: ConsumedMessage | None
    #: (the ColumnBatch, the row) of a column inlet's record (set by the runtime only)
    _column_row: tuple[Any, int]

    def __init__(
        self,
        value: dict[str, Any],
        key: str | None = None,
        inlet: str = "",
        topic: str = "",
        partition: int = -1,
        offset: int = -1,
        timestamp_ms: int = 0,
        headers: Mapping[str, bytes] | None = None,
    ) -> None:
        self.value = value
        self._key = key
        self.inlet = inlet
        self.topic = topic
        self.partition = partition
        self._offset = offset
        self._timestamp_ms = timestamp_ms
        self._headers = headers if headers is not None else {}
        self._message = None

    @classmethod
    def consumed(
        cls,
        message: ConsumedMessage,
        value: dict[str, Any],
        inlet: str,
        topic: str,
        partition: int,
    ) -> Record:
        """A record read from Kafka; its offset, key, timestamp and headers come from
        ``message`` lazily."""
        record = cls.__new__(cls)
        record.value = value
        record.inlet = inlet
        record.topic = topic
        record.partition = partition
        record._message = message
        return record

    @property
    def offset(self) -> int:
        """The record's offset in its partition (-1 for one not read from Kafka)."""
        try:
            return self._offset
        except AttributeError:
            assert self._message is not None
            offset: int = self._message.offset()  # type: ignore[assignment]  # never None here
            self._offset = offset
            return offset

    @property
    def key(self) -> str | None:
        """The record's key as text (UTF-8, undecodable bytes replaced); None if it has none."""
        try:
            return self._key
        except AttributeError:
            assert self._message is not None
            raw = self._message.key()
            self._key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            return self._key

    @property
    def key_bytes(self) -> bytes | None:
        """The record's key as Kafka holds it (bytes); None if it has none."""
        message = getattr(self, "_message", None)
        if message is not None:
            raw = message.key()
            return raw.encode() if isinstance(raw, str) else raw
        key = self.key
        return key.encode() if key is not None else None

    @property
    def timestamp_ms(self) -> int:
        """The record's timestamp, in milliseconds since the epoch."""
        try:
            return self._timestamp_ms
        except AttributeError:
            assert self._message is not None
            self._timestamp_ms = self._message.timestamp()[1]
            return self._timestamp_ms

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The record's headers by name (the last value of a repeated one)."""
        try:
            return self._headers
        except AttributeError:
            assert self._message is not None
            raw = self._message.headers()
            self._headers = dict(raw) if raw else _NO_HEADERS
            return self._headers

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.value,
            self.key,
            self.inlet,
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_ms,
            dict(self.headers),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Record(value={self.value!r}, key={self.key!r}, inlet={self.inlet!r}, "
            f"topic={self.topic!r}, partition={self.partition!r}, offset={self.offset!r}, "
            f"timestamp_ms={self.timestamp_ms!r}, headers={dict(self.headers)!r})"
        )


@dataclass
class Context:
    """What the runtime tells a streamlet about where it runs, and what it hands back.

    The runtime fills in the first fields. The streamlet reports through the
    methods below, which fill ``state``, ``skipped`` and ``metrics``; the runtime
    exports those after each batch and each control record (``skipped`` keeps its
    totals, so a test can read them; own metrics are cleared once exported, and a
    test reads them from the testkit's ``metrics``). ``extras`` is the user's own: nothing
    of the framework reads or writes it.
    """

    app: str = "app"
    streamlet: str = "streamlet"
    replica: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("streamflow"))
    #: The application's schemas (None outside a runtime or the testkit).
    schema_store: SchemaStore | None = None
    #: Control state by name, from :meth:`set_state`.
    state: dict[str, str] = field(default_factory=dict)
    #: Records deliberately not handled, by reason, from :meth:`count_skipped`.
    skipped: dict[str, int] = field(default_factory=dict)
    #: Metrics of the streamlet's own by name, from :meth:`set_gauge` and :meth:`count`.
    metrics: dict[str, own_metrics.OwnMetric] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    #: The durable state of a ``stateful`` streamlet (``Streamlet.state``); None otherwise.
    stores: State | None = None
    _close_callbacks: list[CloseCallback] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def set_state(self, name: str, value: str) -> None:
        """Publish a piece of control state (such as a model version) to metrics and health."""
        self.state[name] = value

    def count_skipped(self, reason: str, *, count: int = 1) -> None:
        """Count records deliberately not handled (sampled out, shed over budget).

        The runtime exports them as ``streamflow_records_skipped{reason}`` after each
        batch; the totals stay here (one entry per reason), so a test can read them.
        """
        if count:
            self.skipped[reason] = self.skipped.get(reason, 0) + count

    def set_gauge(
        self,
        name: str,
        value: float,
        *,
        description: str,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Publish a gauge of the streamlet's own, exported as ``streamflow_<name>``.

        For facts only the logic knows and an alert wants as a number (a drift
        verdict, whether a model is loaded); see :mod:`streamflow.api.own_metrics`.
        """
        own_metrics.report(
            self.metrics, name, value, kind="gauge", description=description, labels=labels
        )

    def count(
        self,
        name: str,
        *,
        description: str,
        count: float = 1,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Add to a counter of the streamlet's own, exported as ``streamflow_<name>_total``."""
        own_metrics.report(
            self.metrics, name, count, kind="counter", description=description, labels=labels
        )

    def on_close(self, callback: CloseCallback) -> None:
        """Call ``callback`` (sync or ``async``) at shutdown, after the streamlet's teardown.

        For what outlives one method: a client opened in ``setup``, a model
        loaded later. Callbacks run newest first, so a resource opened on top
        of another is closed before it.
        """
        self._close_callbacks.append(callback)

    async def aclose(self) -> None:
        """Run the close callbacks, newest first; the runtime awaits this once at shutdown.

        A callback that raises is logged and the others still run: one stuck
        client must not keep the rest open. Each callback runs at most once.
        """
        while self._close_callbacks:
            callback = self._close_callbacks.pop()
            try:
                result = callback()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self.logger.exception("a close callback (%r) failed", callback)


@dataclass(frozen=True)
class ConfigProblem:
    """A config that parses but does not fit the streamlet's ports (see ``check_config``).

    ``code`` is stable (for scripts and docs); ``param`` names the parameter whose
    value the verifier points at, and ``path`` the entry inside that value. A
    ``warning`` is reported without failing ``verify``: the config runs, but is
    probably not what its author meant (an allowlist entry that admits any port).
    """

    code: str
    message: str
    param: str = ""
    hint: str = ""
    path: tuple[str | int, ...] = ()  # keys and indexes inside the parameter's value
    severity: Literal["error", "warning"] = "error"


class Streamlet:
    """Base class of every streamlet. Subclass it and declare ports, parameters and logic."""

    description: ClassVar[str] = ""
    #: True: the streamlet keeps durable state in ``self.state`` (see :mod:`streamflow.api.state`).
    stateful: ClassVar[bool] = False
    #: Data inlets whose records each batch decodes as columns too: ``columns_of(records)``
    #: gives them (see :mod:`streamflow.api.columns`).
    column_inlets: ClassVar[tuple[str, ...]] = ()
    #: The most replicas it can run as (None: any); ``verify`` reports a blueprint that
    #: asks for more. One, for logic that reads the state of every partition at once.
    max_replicas: ClassVar[int | None] = None

    @classmethod
    def check_config(
        cls, config: Mapping[str, Any], *, schemas: Mapping[str, Mapping[str, Any]]
    ) -> list[ConfigProblem]:
        """What ``streamflow verify`` should say about ``config`` against the port schemas.

        ``config`` holds the parsed parameter values; ``schemas`` the Avro schema (as
        JSON) of each port, by port name. Called without running anything; the
        default finds nothing.
        """
        return []

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self._config: dict[str, Any] = dict(config or {})
        self.context = Context(config=self._config)

    @property
    def state(self) -> State:
        """The durable state of the partitions this replica holds (``stateful = True``)."""
        if self.context.stores is None:
            raise StateError(
                f"{type(self).__name__} has no state: set `stateful = True` on the class"
                if not self.stateful
                else "the state is there once the runtime (or the testkit) runs the streamlet"
            )
        return self.context.stores

    def setup(self, context: Context) -> Awaitable[None] | None:
        """Called once before any record; open clients and load resources here."""
        return None

    def teardown(self) -> Awaitable[None] | None:
        """Called once at shutdown, after the last batch is committed.

        What the streamlet registered with ``context.on_close`` is closed after it.
        """
        return None

    def on_control(self, inlet: str, record: Record) -> Output | Awaitable[Output]:
        """Apply one control record. Runs between data batches, never inside one."""
        return None

    def between_batches(self) -> Output | Awaitable[Output]:
        """Called before every batch: apply state prepared off the hot path (a loaded model)."""
        return None

    def accepts_data(self) -> bool:
        """False holds data consumption (for example until a first model is loaded)."""
        return True
