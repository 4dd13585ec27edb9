"""``streamflow run``: an application in the foreground, on this machine.

It verifies the blueprint, finds Kafka (``--bootstrap-servers``, the
blueprint, ``$STREAMFLOW_KAFKA_BOOTSTRAP``, or else an embedded broker it
starts), creates the topics, then deploys the application on an in-process
:class:`~streamflow.operator.local.supervisor.LocalSupervisor`, the same one
the ``deploy`` daemon uses: every replica is its own process through the pod
entry point, restarted with backoff when it crashes, its log multiplexed here
with a coloured prefix (and kept in its log file). Ctrl-C stops the replicas
(each finishes its batch and commits), then the broker it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from streamflow import devkit
from streamflow.blueprint import format_problems
from streamflow.blueprint.model import Application
from streamflow.cli import overrides as overrides_mod
from streamflow.cli import progress, registry_opts
from streamflow.devkit import fetch_progress
from streamflow.operator.local import ReplicaProcess, store
from streamflow.operator.local.supervisor import LocalSupervisor
from streamflow.runtime import kafka_access
from streamflow.runtime.clients import KafkaClients
from streamflow.runtime.topics import TopicsError, ensure_topics
from streamflow.schema.formats import RegisterPolicy

__all__ = ["Started", "refuse_deployed", "register", "running"]

console = Console(stderr=True, highlight=False, soft_wrap=True)
_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan"]


def run(
    blueprint: Annotated[
        Path,
        typer.Argument(
            help="The blueprint YAML file (default: blueprint.yaml).", exists=True, dir_okay=False
        ),
    ] = Path("blueprint.yaml"),
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers", "-b", help="Kafka to use instead of an embedded broker."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: streamlet.param=value (repeatable)."),
    ] = None,
    conf: Annotated[
        Path | None,
        typer.Option(
            help="A YAML file of config overrides: {streamlet: {param: value}}.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    run_for: Annotated[
        str | None, typer.Option("--for", help="Stop by itself after this long (e.g. 30s, 5m).")
    ] = None,
    log_format: Annotated[str, typer.Option(help="Replica log format: text or json.")] = "text",
    registry: registry_opts.RegistryOpt = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also show TensorFlow's and absl's start-up lines in replicas."
        ),
    ] = False,
) -> None:
    """Run an application locally until Ctrl-C."""
    quiet_libraries(verbose=verbose)
    try:
        duration = overrides_mod.duration_seconds(run_for) if run_for else None
    except overrides_mod.OverrideError as exc:
        console.print(f"error: --for {run_for!r}: {exc}", markup=False)
        raise typer.Exit(2) from None
    try:
        overrides = overrides_mod.collect(set_ or [], conf)
    except overrides_mod.OverrideError as exc:
        console.print(str(exc), markup=False)
        raise typer.Exit(1) from None
    # without a registry configured, registry topics get the devkit's (started below)
    result = registry_opts.verified(
        blueprint, overrides=overrides, registry_url=registry, require_registry=False
    )
    if result.application is None:
        console.print(format_problems(result.problems), markup=False)
        raise typer.Exit(1)
    refuse_deployed(result.application)
    printer = _printer(result.application, quiet=not verbose)
    with running(
        result.application, bootstrap_servers, log_format=log_format, on_line=printer
    ) as started:
        console.print(_panel(started.app, started.bootstrap, started.replicas))
        _supervise(started.supervisor, duration)
    console.print("[bold]streamflow[/]: stopped")


def quiet_libraries(*, verbose: bool) -> None:
    """Replicas inherit this process's environment: TensorFlow's C++ start-up lines (and
    absl's note that they come before its logging starts) stay out of the user's way
    unless asked for, or unless the user chose a level."""
    if verbose:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@dataclasses.dataclass(frozen=True)
class Started:
    """An application running on this machine: its replicas, and the Kafka they use."""

    app: Application
    bootstrap: str
    supervisor: LocalSupervisor
    replicas: list[ReplicaProcess]


@contextlib.contextmanager
def running(
    app: Application,
    bootstrap_servers: str | None,
    *,
    log_format: str = "text",
    on_line: Callable[[ReplicaProcess, str], None] | None = None,
) -> Iterator[Started]:
    """Run ``app`` here until the block ends: Kafka (an embedded broker unless one is
    named), its registry, its topics, and every replica on an in-process supervisor,
    which the block must ``tick()``. The replicas stop (each finishing its batch and
    committing) when the block ends, then whatever was started for them."""
    with _kafka(app, bootstrap_servers) as bootstrap, _registry(app) as app:
        _create_topics(app, bootstrap)
        home = store.home()
        folder = home.app(app.name)
        runtime = {"bootstrap": bootstrap, "target": "run", "owner_pid": os.getpid()}
        store.write_json(folder.runtime, {**runtime, "replicas": []})  # before the spec:
        store.write_json(folder.spec, app.to_dict())  # a deploy daemon must never adopt it
        supervisor = LocalSupervisor(
            home=home,
            on_line=on_line or _printer(app),
            on_event=lambda _app, m: console.print(f"[bold]streamflow[/]: {m}"),
            log_format=log_format,
        )
        try:
            supervisor.apply(app, bootstrap=bootstrap)
            replicas = supervisor.replicas(app.name)
            store.write_json(
                folder.runtime,
                {
                    **runtime,
                    "replicas": [
                        {"name": r.name, "pid": r.pid, "health_port": r.health_port}
                        for r in replicas
                    ],
                },
            )
            yield Started(app, bootstrap, supervisor, replicas)
        finally:
            console.print(
                "[bold]streamflow[/]: stopping replicas (each finishes its batch and commits)"
            )
            supervisor.stop()


def refuse_deployed(app: Application) -> None:
    folder = store.home().app(app.name)
    if folder.is_local() and folder.spec.exists():
        console.print(
            f"error: {app.name!r} is deployed on the local target; "
            f"`streamflow undeploy {app.name}` first, or run it under another name",
            markup=False,
        )
        raise typer.Exit(1)


@contextlib.contextmanager
def _kafka(app: Application, explicit: str | None) -> Iterator[str]:
    bootstrap = explicit or app.kafka.bootstrap or os.environ.get("STREAMFLOW_KAFKA_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
        return
    try:  # Java, then the jars (fetched on first use, with their own progress bar)
        devkit.require_java()
        lib = devkit.find_kafka_lib(fetch=True, progress=fetch_progress.for_console(console))
    except devkit.DevkitError as exc:
        console.print(f"error: {exc}", markup=False, style="red")
        raise typer.Exit(1) from None
    broker = devkit.KafkaBroker(lib_dir=lib)
    with progress.waiting("starting an embedded Apache Kafka broker (KRaft)", console=console):
        try:
            broker.start()
        except devkit.DevkitError as exc:
            console.print(f"error: {exc}", markup=False, style="red")
            raise typer.Exit(1) from None
    console.print(f"[bold]streamflow[/]: embedded Kafka ready at {broker.bootstrap_servers}")
    try:
        yield broker.bootstrap_servers
    finally:
        console.print("[bold]streamflow[/]: stopping the embedded broker")
        broker.stop()


@contextlib.contextmanager
def _registry(app: Application) -> Iterator[Application]:
    """The application, with the devkit's schema registry if it needs one and names none."""
    if not app.uses_registry or app.kafka.schema_registry:
        yield app
        return
    registry = devkit.SchemaRegistry()
    with progress.waiting("starting an embedded schema registry (Apicurio)", console=console):
        try:
            registry.start()
        except devkit.DevkitError as exc:
            console.print(f"error: {exc}", markup=False, style="red")
            raise typer.Exit(1) from None
    console.print(
        f"[bold]streamflow[/]: embedded schema registry ready at {registry.url} "
        "(in memory; schemas are registered as the replicas start)"
    )
    try:
        yield registry_opts.with_registry(app, registry.url, register=RegisterPolicy.AUTO)
    finally:
        console.print("[bold]streamflow[/]: stopping the embedded schema registry")
        registry.stop()


def _create_topics(app: Application, bootstrap: str) -> None:
    clients = KafkaClients.for_application(app, bootstrap=bootstrap, environ=os.environ)
    try:
        kafka_access.check_access(clients.config)  # a clear cause, not a hang
        report = ensure_topics(clients.admin(), app)
    except (TopicsError, kafka_access.KafkaAccessError) as exc:
        console.print(f"error: {exc}", markup=False, style="red")
        raise typer.Exit(1) from None
    for warning in report.warnings:
        console.print(f"warning: {warning}", markup=False, style="yellow")


# TensorFlow's start-up lines: absl's note that its logging has not started, and the C++
# INFO and WARNING lines (oneDNN, CPU features) that TF_CPP_MIN_LOG_LEVEL no longer hides
# since TensorFlow logs through absl. Errors are never hidden.
TF_STARTUP = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IW]\d{4} [\d:.]+ +\d+ \w+\.cc:\d+\] "
)


def _printer(app: Application, *, quiet: bool = True) -> Callable[[ReplicaProcess, str], None]:
    colours = dict(zip(app.streamlets, itertools.cycle(_COLOURS), strict=False))
    width = max((len(n) for n in app.streamlets), default=8) + 3

    def print_line(replica: ReplicaProcess, line: str) -> None:
        if quiet and TF_STARTUP.match(line):
            return
        colour = colours.get(replica.streamlet, "white")
        console.print(Text.assemble((f"{replica.name:<{width}}| ", colour), line), soft_wrap=True)

    return print_line


def _panel(app: Application, bootstrap: str, replicas: list[ReplicaProcess]) -> Panel:
    from streamflow.blueprint import graph

    topics = Table("topic", "partitions", "producers", "consumers", box=None, pad_edge=False)
    for topic in app.topics.values():
        topics.add_row(
            topic.name,
            str(topic.partitions),
            ", ".join(map(str, topic.producers)),
            ", ".join(map(str, topic.consumers)),
        )
    metrics = Table("replica", "metrics", box=None, pad_edge=False)
    for replica in replicas:
        metrics.add_row(replica.name, f"http://127.0.0.1:{replica.health_port}/metrics")
    body = Group(
        Text(graph.to_text(graph.build_graph(app))),
        Text(""),
        topics,
        Text(""),
        Text(f"Kafka: {bootstrap}"),
        metrics,
        Text("Ctrl-C stops everything cleanly.", style="dim"),
    )
    return Panel(body, title=f"streamflow run: {app.name}", expand=False)


def _supervise(supervisor: LocalSupervisor, duration: float | None) -> None:
    deadline = time.monotonic() + duration if duration else None
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while deadline is None or time.monotonic() < deadline:
            supervisor.tick()
            time.sleep(0.25)  # a supervision tick, not a synchronisation
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command("run")(run)
