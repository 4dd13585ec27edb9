"""Which topics a scoring run writes into and reads back from, and with which schemas.

A run feeds the data set into one *input* topic and collects results from one
*output* topic, plus the dead letters of every streamlet the records can reach.
Both topics are chosen from the blueprint when the choice is unambiguous:

* the input is a topic a streamlet reads as data (not as control) and that only
  sources write, or nothing does: where live data enters the application;
* the output is what the streamlets reading the input write; when they write
  several topics (results and a model server's status), the one their ``out``
  outlets write.

When an application has several of either, ``--into`` and ``--from`` choose, and
the error lists the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamflow.api.ports import PortKind
from streamflow.blueprint.model import Application, PortRef, TopicSpec

__all__ = ["PlanError", "ScorePlan", "plan"]


class PlanError(ValueError):
    """The application cannot be scored as asked; the message says why and what to pass."""


@dataclass(frozen=True)
class ScorePlan:
    app: Application
    input_topic: TopicSpec
    #: the schema the input is written with: that of the data inlets reading it
    input_schema: str
    output_topic: TopicSpec
    #: the schema the output is read with: that of the outlets writing it
    output_schema: str
    #: the dead-letter topic of each streamlet downstream of the input, by streamlet
    dead_letter_topics: dict[str, str]


def plan(app: Application, *, into: str | None = None, read_from: str | None = None) -> ScorePlan:
    """The plan for scoring through ``app``; :class:`PlanError` names the choices if unclear."""
    input_topic = _chosen(app, into, _input_candidates(app), "input", "--into")
    readers = [ref for ref in input_topic.consumers if _kind(app, ref) is PortKind.INLET]
    if not readers:
        raise PlanError(f"no streamlet reads {input_topic.name!r} as data")
    output_topic = _chosen(app, read_from, _output_candidates(app, readers), "output", "--from")
    if output_topic.name == input_topic.name:
        raise PlanError("the output topic must not be the input topic")
    downstream = _downstream(app, input_topic.name)
    _check_lineage(app, downstream)
    return ScorePlan(
        app=app,
        input_topic=input_topic,
        input_schema=_schema(app, readers, "reads"),
        output_topic=output_topic,
        output_schema=_schema(app, list(output_topic.producers), "writes"),
        dead_letter_topics={s: app.dlq_topic(s) for s in sorted(downstream)},
    )


def _chosen(
    app: Application, named: str | None, candidates: list[str], what: str, option: str
) -> TopicSpec:
    if named is not None:
        if named not in app.topics:
            known = ", ".join(sorted(app.topics))
            raise PlanError(f"{app.name!r} has no topic {named!r} (topics: {known})")
        return app.topics[named]
    if len(candidates) == 1:
        return app.topics[candidates[0]]
    if not candidates:
        raise PlanError(f"cannot tell which topic is the {what} of {app.name!r}: pass {option}")
    raise PlanError(
        f"{app.name!r} has several possible {what} topics ({', '.join(candidates)}): "
        f"pass {option} with one of them"
    )


def _kind(app: Application, ref: PortRef) -> PortKind | None:
    descriptor = app.descriptor(ref.streamlet)
    for port in (*descriptor.inlets, *descriptor.control_inlets, *descriptor.outlets):
        if port.name == ref.port:
            return port.kind
    return None


def _is_source(app: Application, streamlet: str) -> bool:
    return not app.descriptor(streamlet).inlets


def _input_candidates(app: Application) -> list[str]:
    return sorted(
        topic.name
        for topic in app.topics.values()
        if any(_kind(app, ref) is PortKind.INLET for ref in topic.consumers)
        and all(_is_source(app, ref.streamlet) for ref in topic.producers)
    )


def _output_candidates(app: Application, readers: list[PortRef]) -> list[str]:
    streamlets = {ref.streamlet for ref in readers}
    written = sorted(
        topic.name
        for topic in app.topics.values()
        if any(ref.streamlet in streamlets for ref in topic.producers)
    )
    # a model server's status, say, goes beside the results: the main outlet is "out"
    main = [
        name
        for name in written
        if any(
            ref.streamlet in streamlets and ref.port == "out" for ref in app.topics[name].producers
        )
    ]
    return main if len(written) > 1 and len(main) == 1 else written


def _downstream(app: Application, topic: str) -> set[str]:
    """Every streamlet a record written to ``topic`` can reach, as data."""
    reached: set[str] = set()
    frontier = [topic]
    while frontier:
        current = app.topics[frontier.pop()]
        for ref in current.consumers:
            if _kind(app, ref) is PortKind.INLET and ref.streamlet not in reached:
                reached.add(ref.streamlet)
                frontier += [
                    t.name
                    for t in app.topics.values()
                    if any(p.streamlet == ref.streamlet for p in t.producers)
                ]
    return reached


def _check_lineage(app: Application, downstream: set[str]) -> None:
    """Results are told from live traffic by the lineage headers every streamlet on the
    way copies (runtime/lineage.py): one that writes without them would lose the run."""
    writers = {ref.streamlet for topic in app.topics.values() for ref in topic.producers}
    off = sorted(s for s in downstream & writers if not app.streamlets[s].lineage)
    if off:
        raise PlanError(
            f"{', '.join(off)} {'has' if len(off) == 1 else 'have'} 'lineage: false' in the "
            "blueprint, so the outputs do not carry the run and row of their inputs and the "
            "run could not find its results: remove the setting (or set it to true) and "
            "run or deploy the application again"
        )


def _schema(app: Application, refs: list[PortRef], verb: str) -> str:
    schemas = set()
    for ref in refs:
        descriptor = app.descriptor(ref.streamlet)
        for port in (*descriptor.inlets, *descriptor.outlets):
            if port.name == ref.port:
                schemas.add(port.schema)
    if len(schemas) != 1:
        names = ", ".join(str(r) for r in refs)
        raise PlanError(f"the ports that {verb} it ({names}) do not agree on one schema")
    return schemas.pop()
