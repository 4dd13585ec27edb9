"""One score run, from the data set to the results on disk: the use case behind
``streamflow score``, as values and exceptions rather than printing.

:func:`score` takes a chosen plan (which topic to feed, which to read,
:mod:`streamflow.score.plan`) and a request, and returns a :class:`ScoreDone`.
On the way it

* makes the input's and the results' codecs, for their topics' formats, and
  counts the rows, before anything is sent;
* resumes the run whose state lies beside the results
  (``<results>.score-state.json``) when there is one for this input, or begins
  a new one at the result topics' ends; the state is saved as the run goes
  (:class:`~streamflow.score.engine.RunState`);
* runs the :class:`~streamflow.score.engine.Scorer`, and writes the results and
  the dead letters; on a stall, what came back so far, keeping the state so the
  same request resumes.

What stops a run is a :class:`ScoreFailed` with a sentence and a hint;
:class:`ScoreInterrupted` when the user interrupted it (the state is kept).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from streamflow.schema.registry import RegistryUnavailable, SchemaNotRegistered
from streamflow.score import engine, inputs, results
from streamflow.score.plan import ScorePlan

__all__ = ["ScoreDone", "ScoreFailed", "ScoreInterrupted", "ScoreRequest", "run_state", "score"]


class ScoreFailed(engine.ScoreError):
    """A run that cannot go on, in a sentence; ``hint`` says what to do instead."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class ScoreInterrupted(ScoreFailed):
    """The user interrupted the run; its state is kept, so the same request resumes it."""


@dataclasses.dataclass(frozen=True)
class ScoreRequest:
    input_path: Path
    fmt: str  # the input's format (inputs.data_format)
    output_path: Path
    run_id: str | None = None  # default: a new id, or the interrupted run's
    restart: bool = False  # a new run even when an interrupted one could resume
    max_in_flight: int = 10_000
    stall_timeout: float = 300.0

    @property
    def state_path(self) -> Path:
        return self.output_path.with_name(self.output_path.name + ".score-state.json")


@dataclasses.dataclass(frozen=True)
class ScoreDone:
    run: str
    rows: int
    results: int
    dead_letters: int
    output: Path
    dead_letters_file: Path | None  # None when no row was dead-lettered

    def to_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "event": "done",
            "run": self.run,
            "rows": self.rows,
            "results": self.results,
            "dead_letters": self.dead_letters,
            "output": str(self.output),
        }
        if self.dead_letters_file is not None:
            summary["dead_letters_file"] = str(self.dead_letters_file)
        return summary


def score(
    chosen: ScorePlan,
    clients: KafkaClients,
    request: ScoreRequest,
    *,
    on_resume: Callable[[engine.RunState], None] = lambda _state: None,
    on_start: Callable[[engine.RunState], None] = lambda _state: None,
    on_progress: Callable[[engine.Progress], None] | None = None,
    tick: Callable[[], None] | None = None,
) -> ScoreDone:
    """Score the request's rows through the plan's topics; the results, written.

    ``on_resume`` is told the state of an interrupted run taken up again,
    ``on_start`` the state the rows go with (after the rows are counted),
    ``on_progress`` how far the run is; ``tick`` is called while waiting (a
    supervisor of the application started for the run).
    """
    app = chosen.app
    store = SchemaStore(app.schema_paths)
    codecs = Codecs(app, store)
    try:
        input_codec = codecs.for_topic(chosen.input_topic, chosen.input_schema, producing=True)
        output_codec = codecs.for_topic(chosen.output_topic, chosen.output_schema, producing=False)
    except (RegistryUnavailable, SchemaNotRegistered) as exc:
        raise ScoreFailed(f"cannot encode for {chosen.input_topic.name!r}: {exc}") from None
    try:
        total = inputs.count_rows(request.input_path, request.fmt)
    except (inputs.InputError, OSError, UnicodeDecodeError) as exc:
        raise ScoreFailed(f"cannot read {request.input_path}: {exc}") from None
    failures = engine.FailedRows()
    producer = clients.producer(client_id="streamflow-score", **failures.producer_config())
    consumer = clients.reader(client_id="streamflow-score")
    schema = store.get(chosen.input_schema)
    # reading begins now, on a thread: the reader starts while the run sets up
    batches = inputs.Prefetch(inputs.read_batches(request.input_path, request.fmt, schema))
    try:
        topics = [chosen.output_topic.name, *chosen.dead_letter_topics.values()]
        state = run_state(
            request,
            total,
            lambda: engine.end_offsets(consumer, topics),
            on_resume=on_resume,
            app_name=app.name,
        )
        scorer = engine.Scorer(
            producer=producer,
            failures=failures,
            consumer=consumer,
            input_topic=chosen.input_topic.name,
            input_codec=input_codec,
            input_schema=chosen.input_schema,
            output_topic=chosen.output_topic.name,
            output_codec=output_codec,
            dead_letter_topics=chosen.dead_letter_topics,
            run_id=state.run,
            max_in_flight=request.max_in_flight,
            stall_timeout_s=request.stall_timeout,
            convert=inputs.converter(schema),
        )
        on_start(state)
        try:
            outcome = scorer.run(
                batches,
                state,
                state_path=request.state_path,
                on_progress=on_progress,
                tick=tick,
            )
        except KeyboardInterrupt:
            raise ScoreInterrupted(
                f"interrupted; run the same command again to resume run {state.run}"
            ) from None
        except engine.ScoreStalled as exc:
            # what came back is kept; the state stays, so the same request resumes
            got = results.write_results(request.output_path, scorer.outcome)
            dead_path = results.dead_letters_path(request.output_path)
            results.write_dead_letters(dead_path, scorer.outcome)
            raise ScoreFailed(
                f"{exc} ({got:,} results so far written to {request.output_path})",
                hint="a streamlet that filters rows (returns nothing for them) never answers "
                "for them: score through an application whose every row gives an output or a "
                "dead letter",
            ) from None
    finally:
        batches.close()
        consumer.close()
    written = results.write_results(request.output_path, outcome)
    dead_path = results.dead_letters_path(request.output_path)
    dead = results.write_dead_letters(dead_path, outcome)
    request.state_path.unlink(missing_ok=True)
    return ScoreDone(
        run=state.run,
        rows=state.total,
        results=written,
        dead_letters=dead,
        output=request.output_path,
        dead_letters_file=dead_path if dead else None,
    )


def run_state(
    request: ScoreRequest,
    total: int,
    end_offsets: Callable[[], dict[str, dict[str, int]]],
    *,
    on_resume: Callable[[engine.RunState], None] = lambda _state: None,
    app_name: str = "the application",
) -> engine.RunState:
    """The interrupted run's state to resume, or a new run's (beginning at the result
    topics' ``end_offsets``), saved."""
    path, fingerprint = request.state_path, _fingerprint(request.input_path)
    if path.is_file() and not request.restart:
        try:
            saved = engine.RunState.load(path)
        except engine.ScoreError as exc:
            raise ScoreFailed(str(exc)) from None
        if request.run_id is not None and request.run_id != saved.run:
            raise ScoreFailed(
                f"{path.name} is the state of run {saved.run!r}, interrupted",
                hint=f"--run-id {saved.run} resumes it; --restart starts a new run",
            )
        if saved.input != fingerprint:
            raise ScoreFailed(
                f"the input changed since run {saved.run!r} began",
                hint="--restart starts a new run on the input as it is now",
            )
        on_resume(saved)
        return saved
    try:
        offsets = end_offsets()
    except engine.ScoreError as exc:
        raise ScoreFailed(
            str(exc),
            hint=f"is {app_name!r} running? `streamflow run` or `deploy` it, or pass --start",
        ) from None
    new = engine.RunState(
        run=request.run_id or _new_run_id(), input=fingerprint, total=total, offsets=offsets
    )
    new.save(path)
    return new


def _new_run_id() -> str:
    return f"score-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def _fingerprint(path: Path) -> dict[str, object]:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
