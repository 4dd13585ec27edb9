"""``streamflow model push`` and ``model status``: models for a running application.

``push`` packs the artifact (a SavedModel directory as a deterministic tar.gz,
a ``.keras`` or an ``.onnx`` file), or names a model-server URL, computes the sha256, and
produces a ``ModelDescriptor`` keyed by model name to the compacted topic
bound to the streamlet's control inlet. Then it follows the streamlet's
status topic until every replica reports ``serving``, ``failed`` or
``rejected`` for that version, or the timeout passes, showing how many serve
it so far (a live line on a terminal, a plain line per change otherwise; with
``-o json|yaml`` stdout carries only the result as data).

The control and status topics are topics of the application like any other,
in whatever format the blueprint gives them: the descriptor is written, and
the statuses read, with the codec their topic's format calls for
(:class:`~streamflow.runtime.codecs.Codecs`), as the streamlet's replicas do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from rich.text import Text

from streamflow.blueprint.model import Application, TopicSpec
from streamflow.cli import apps, model_wait, output, registry_opts
from streamflow.operator import backends, targets
from streamflow.operator.local import store
from streamflow.runtime import kafka_access
from streamflow.runtime.clients import KafkaClients, watermarks
from streamflow.runtime.codecs import Codecs
from streamflow.schema import SchemaStore
from streamflow.schema.codecs import Codec
from streamflow.schema.models import PROTOCOLS, ModelState
from streamflow.schema.registry import RegistryError, RegistryUnavailable
from streamflow.streamlets.serving.publisher import build_descriptor

__all__ = ["register"]

model_app = typer.Typer(
    help="Push models to a running application and see what serves.", no_args_is_help=True
)

DESCRIPTOR = "streamflow.ml.ModelDescriptor"
STATUS = model_wait.STATUS


@model_app.command("push")
def push(
    target: Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")],
    streamlet: Annotated[str, typer.Argument(help="The serving streamlet to update.")],
    saved_model: Annotated[
        Path | None,
        typer.Option(help="A TensorFlow SavedModel directory.", exists=True, file_okay=False),
    ] = None,
    keras: Annotated[
        Path | None, typer.Option(help="A Keras 3 .keras file.", exists=True, dir_okay=False)
    ] = None,
    onnx: Annotated[
        Path | None,
        typer.Option(
            help="An ONNX model file (run with onnxruntime).", exists=True, dir_okay=False
        ),
    ] = None,
    url: Annotated[str | None, typer.Option(help="A model server's base URL.")] = None,
    protocol: Annotated[
        str,
        typer.Option(help="The server's protocol: v1 (TF Serving/KServe) or v2 (Open Inference)."),
    ] = "v2",
    version: Annotated[
        int | None, typer.Option(help="The version (default: the newest on the topic + 1).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The model name (default: the one already served).")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="A descriptor parameter key=value (repeatable)."),
    ] = None,
    by_reference: Annotated[
        bool,
        typer.Option(
            "--by-reference", help="Send a file:// location instead of the artifact bytes."
        ),
    ] = False,
    description: Annotated[str, typer.Option(help="A note stored with the descriptor.")] = "",
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every replica's status (0: don't wait).")
    ] = 120.0,
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
    fmt: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress while waiting; errors still show.")
    ] = False,
) -> None:
    """Push a new model version to a serving streamlet and wait until it serves."""
    sources = [s for s in (saved_model, keras, onnx, url) if s is not None]
    if len(sources) != 1:
        output.fail(
            "give exactly one of --saved-model, --keras, --onnx or --url",
            exit_code=output.EXIT_USAGE,
        )
    if fmt not in ("table", "json", "yaml"):
        output.fail(f"-o {fmt!r}: use table, json or yaml", exit_code=output.EXIT_USAGE)
    if protocol not in PROTOCOLS:
        output.fail(f"unknown protocol {protocol!r}: use v1 or v2", exit_code=output.EXIT_USAGE)
    app, bootstrap = _resolve(target, bootstrap_servers, registry)
    clients = apps.kafka_clients(app, bootstrap)
    with apps.kafka_errors(bootstrap), _registry_errors():
        control, status_spec = _topics(app, streamlet)
        control_topic = control.name
        status_topic = status_spec.name if status_spec else None
        codecs = Codecs(app, SchemaStore(app.schema_paths))
        # before anything is written: the descriptor's schema id resolved (or registered),
        # and the statuses' codec made, so a registry problem stops the push, not the wait
        descriptors = _codec(codecs, control, DESCRIPTOR, producing=True)
        statuses_codec = (
            _codec(codecs, status_spec, STATUS, producing=False) if status_spec else None
        )
        history = _read_all(clients, control_topic, descriptors)
        model_name = name or (
            history[-1]["name"] if history else (keras or saved_model or onnx or Path("model")).stem
        )
        newest = max((d["version"] for d in history if d["name"] == model_name), default=0)
        chosen = version if version is not None else newest + 1
        artifacts = {"keras": keras, "saved_model": saved_model, "onnx": onnx}
        artifact = next(((form, path) for form, path in artifacts.items() if path), None)
        descriptor = build_descriptor(
            model_name,
            chosen,
            artifact=artifact,
            url=url,
            protocol=protocol,
            parameters=_params(param or []),
            by_reference=by_reference,
            description=description,
        )
        status_start = _end_offsets(clients, status_topic) if status_topic else {}
        _produce(clients, control_topic, model_name, descriptors.encode(descriptor))
        size = len(descriptor["data"] or b"")
        pushed = Text.assemble(
            "pushed ",
            (f"{model_name}:{chosen}", "bold"),
            f" ({descriptor['kind']}{f', {size:,} bytes' if size else ''}) to {control_topic}",
        )
        # with -o json|yaml, stdout is the data alone
        (output.console() if fmt == "table" else output.error_console()).print(pushed)
        awaited = model_wait.Awaited(
            streamlet, model_name, chosen, timeout, machine_output=fmt != "table", quiet=quiet
        )
        awaited_on = status_topic if timeout > 0 else None  # no status topic: nothing to wait for
        statuses = (
            model_wait.await_status(
                app,
                awaited,
                clients,
                awaited_on,
                status_start,
                statuses_codec,
                replicas=replica_count(_local_target(), app, streamlet),
            )
            if awaited_on is not None and statuses_codec is not None
            else {}
        )
        if fmt != "table":
            summary = {"model": model_name, "version": chosen, "kind": descriptor["kind"]}
            output.print_data({**summary, "topic": control_topic, "replicas": statuses}, fmt=fmt)
        elif statuses:
            model_wait.print_status_table(statuses)
        if awaited_on is not None:
            model_wait.check_served(statuses, awaited, app)


def replica_count(
    target: targets.Target | None, app: Application, streamlet: str
) -> Callable[[], int]:
    """How many replicas of ``streamlet`` run now, as the deployment (and its autoscaler) says.

    The spec's ``replicas`` is only where an autoscaler starts; without a
    deployment (nothing runs it here), it is all there is. While waiting, a
    status that cannot be read keeps the last count known.
    """
    known = app.streamlets[streamlet].replicas

    def count() -> int:
        nonlocal known
        if target is None:
            return known
        try:
            found = target.status(app.name)
        except targets.TargetError:
            return known
        desired = {s.name: s.desired for s in found.streamlets}
        known = desired.get(streamlet, known)
        return known

    return count


def _local_target() -> targets.Target | None:
    """Where ``resolve`` finds applications: the local state (``run`` and ``deploy``)."""
    try:
        return backends.get_target("local", home=store.home().root)
    except targets.TargetError:
        return None


@model_app.command("status")
def status(
    target: Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")],
    streamlet: Annotated[str | None, typer.Argument(help="Only this serving streamlet.")] = None,
    fmt: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
    ] = None,
    registry: registry_opts.RegistryOpt = None,
) -> None:
    """Show the model and version each replica serves, and the latest event of each."""
    app, bootstrap = _resolve(target, bootstrap_servers, registry)
    with apps.kafka_errors(bootstrap), _registry_errors():
        latest = _latest_statuses(app, apps.kafka_clients(app, bootstrap), streamlet)
    if fmt != "table":
        output.print_data(list(latest.values()), fmt=fmt)
        return
    if not latest:
        output.console().print("no model status yet")
        return
    model_wait.print_status_table(latest)


def _latest_statuses(
    app: Application, clients: KafkaClients, streamlet: str | None
) -> dict[str, dict[str, Any]]:
    """Each replica's latest serving record, with the latest other event beside it."""
    codecs = Codecs(app, SchemaStore(app.schema_paths))
    latest: dict[str, dict[str, Any]] = {}
    for name in [streamlet] if streamlet else _serving_streamlets(app):
        _, status_topic = _topics(app, name)
        if status_topic is None:
            continue
        codec = _codec(codecs, status_topic, STATUS, producing=False)
        for record in _read_all(clients, status_topic.name, codec):
            previous = latest.get(record["replica"])
            serving = ModelState.SERVING
            if record["state"] == serving or previous is None or previous["state"] != serving:
                latest[record["replica"]] = record
            else:
                latest[record["replica"]] = {
                    **previous,
                    "last_event": f"{record['state']} v{record['version']}: {record['message']}",
                }
    return latest


def _serving_streamlets(app: Application) -> list[str]:
    return [
        n
        for n in app.streamlets
        if any(p.schema == DESCRIPTOR for p in app.descriptor(n).control_inlets)
    ]


def _resolve(
    target: str, bootstrap_servers: str | None, registry: str | None
) -> tuple[Application, str]:
    app, bootstrap = apps.resolve(target, bootstrap_servers)
    return (registry_opts.with_registry(app, registry) if registry else app), bootstrap


def _codec(codecs: Codecs, topic: TopicSpec, schema: str, *, producing: bool) -> Codec:
    """The codec of ``topic``'s format; a producing one has its schema id at hand."""
    try:
        return codecs.for_topic(topic, schema, producing=producing)
    except RuntimeError as exc:  # no registry configured, or its client not installed
        output.fail(f"{topic.name} ({topic.format}): {exc}")


@contextlib.contextmanager
def _registry_errors() -> Iterator[None]:
    """A registry that refuses (a schema not registered) or cannot be reached: a sentence."""
    try:
        yield
    except (RegistryError, RegistryUnavailable) as exc:
        output.fail(str(exc))


def _topics(app: Application, streamlet: str) -> tuple[TopicSpec, TopicSpec | None]:
    if streamlet not in app.streamlets:
        output.fail(
            f"application {app.name!r} has no streamlet {streamlet!r}",
            hint=f"streamlets: {', '.join(app.streamlets)}",
        )
    descriptor = app.descriptor(streamlet)
    control = next((p for p in descriptor.control_inlets if p.schema == DESCRIPTOR), None)
    if control is None:
        output.fail(
            f"{streamlet!r} has no control inlet for {DESCRIPTOR}; it does not serve models"
        )
    topic = app.topic_for(streamlet, control.name)
    if topic is None:
        output.fail(f"{streamlet}.{control.name} is not connected to a topic in the blueprint")
    status_port = next((p for p in descriptor.outlets if p.schema == STATUS), None)
    return topic, app.topic_for(streamlet, status_port.name) if status_port else None


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            output.fail(f"--param {pair!r}: expected key=value", exit_code=output.EXIT_USAGE)
        out[key] = value
    return out


def _produce(clients: KafkaClients, topic: str, key: str, value: bytes) -> None:
    errors: list[KafkaError] = []
    large: dict[str, Any] = {"message.max.bytes": 16 * 1024 * 1024}
    producer = clients.producer(client_id="streamflow-model-push", **large)
    producer.produce(
        topic,
        value,
        key.encode(),
        headers=[("streamflow-schema", DESCRIPTOR.encode())],
        on_delivery=lambda err, _msg: errors.append(err) if err else None,
    )
    try:
        unsent = producer.flush(30)
    except (KafkaException, SystemError) as exc:  # confluent-kafka raises fatal errors here
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__
        if not isinstance(cause, KafkaException):
            raise
        errors.insert(0, cause.args[0])
        unsent = 0
    if unsent or errors:
        denial = errors and kafka_access.describe_denial(errors[0], clients.config, topic=topic)
        reason = errors[0].str() if errors else "timed out"
        output.fail(denial or f"could not write the descriptor to {topic}: {reason}")


def _end_offsets(clients: KafkaClients, topic: str) -> dict[int, int]:
    consumer = model_wait.consumer(clients)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {p: watermarks(consumer, TopicPartition(topic, p))[1] for p in meta.partitions}
    finally:
        consumer.close()


def _read_all(clients: KafkaClients, topic: str, codec: Codec) -> list[dict[str, Any]]:
    """Every decodable record of a (small, compacted) topic, oldest first."""
    consumer = model_wait.consumer(clients)
    records: list[tuple[int, dict[str, Any]]] = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: watermarks(consumer, TopicPartition(topic, p)) for p in meta.partitions}
        pending = {p for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None or msg.value() is None:
                    continue
                with contextlib.suppress(ValueError):  # not a descriptor: not ours to show
                    records.append((msg.timestamp()[1], codec.decode(msg.value())))  # type: ignore[arg-type]
                partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
                if offset + 1 >= ends[partition][1]:
                    pending.discard(partition)
            for tp in consumer.position(consumer.assignment()):
                if tp.offset >= ends[tp.partition][1]:
                    pending.discard(tp.partition)
    finally:
        consumer.close()
    return [r for _, r in sorted(records, key=lambda item: item[0])]


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
