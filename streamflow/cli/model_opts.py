"""What the ``model`` commands share: their options, how they resolve the app, and the wait.

``model push`` and ``model rollout`` write descriptors to a serving streamlet's control
topic the same way: the same artifact options (:func:`push_request`), the same errors in
a sentence (:func:`push_errors`), and the same wait for every replica's status on what
was written (:func:`follow`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from streamflow.blueprint.model import Application
from streamflow.cli import apps, model_wait, output, registry_opts
from streamflow.models.kinds import PROTOCOLS, ModelState
from streamflow.operator import backends, targets
from streamflow.operator import model_versions as versions
from streamflow.operator.local import store
from streamflow.schema.registry import RegistryError, RegistryUnavailable

__all__ = [
    "Following",
    "check_format",
    "follow",
    "local_target",
    "push_errors",
    "push_request",
    "resolve",
]


TargetArg = Annotated[str, typer.Argument(help="A blueprint file, or the name of a running app.")]
StreamletArg = Annotated[str, typer.Argument(help="The serving streamlet to update.")]
SavedModelOpt = Annotated[
    Path | None,
    typer.Option(help="A TensorFlow SavedModel directory.", exists=True, file_okay=False),
]
KerasOpt = Annotated[
    Path | None, typer.Option(help="A Keras 3 .keras file.", exists=True, dir_okay=False)
]
OnnxOpt = Annotated[
    Path | None,
    typer.Option(help="An ONNX model file (run with onnxruntime).", exists=True, dir_okay=False),
]
UrlOpt = Annotated[str | None, typer.Option(help="A model server's base URL.")]
ProtocolOpt = Annotated[
    str,
    typer.Option(help="The server's protocol: v1 (TF Serving/KServe) or v2 (Open Inference)."),
]
VersionOpt = Annotated[
    int | None, typer.Option(help="The version (default: the newest on the topic + 1).")
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", help="A descriptor parameter key=value (repeatable)."),
]
ByReferenceOpt = Annotated[
    bool,
    typer.Option("--by-reference", help="Send a file:// location instead of the artifact bytes."),
]
DescriptionOpt = Annotated[str, typer.Option(help="A note stored with the descriptor.")]
TimeoutOpt = Annotated[
    float, typer.Option(help="Seconds to wait for every replica's status (0: don't wait).")
]
BootstrapOpt = Annotated[
    str | None, typer.Option("--bootstrap-servers", "-b", envvar="STREAMFLOW_KAFKA_BOOTSTRAP")
]
FormatOpt = Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress while waiting; errors still show.")
]


@dataclasses.dataclass(frozen=True)
class Following:
    """How a command that wrote descriptors waits, and shows what it waited for."""

    app: Application
    streamlet: str
    timeout: float
    fmt: str
    quiet: bool
    goal: ModelState = ModelState.SERVING


def follow(
    said: Text, channel: versions.ModelChannel, pushed: versions.Pushed, how: Following
) -> None:
    """Say what was written, wait for every replica's final status on it (unless told
    not to), show the statuses, and exit 1 unless each reached ``how.goal``."""
    # with -o json|yaml, stdout is the data alone
    (output.console() if how.fmt == "table" else output.error_console()).print(said)
    awaited = model_wait.Awaited(
        how.streamlet,
        pushed.model,
        pushed.version,
        how.timeout,
        machine_output=how.fmt != "table",
        quiet=how.quiet,
        goal=how.goal,
    )
    waits = how.timeout > 0 and channel.status is not None  # no status topic: nothing to wait on
    statuses = (
        model_wait.await_status(
            channel,
            pushed,
            awaited,
            replicas=versions.replica_count(local_target(), how.app, how.streamlet),
        )
        if waits
        else {}
    )
    if how.fmt != "table":
        summary = {"model": pushed.model, "version": pushed.version, "kind": pushed.kind}
        output.print_data({**summary, "topic": pushed.topic, "replicas": statuses}, fmt=how.fmt)
    elif statuses:
        model_wait.print_status_table(statuses)
    if waits:
        model_wait.check_served(statuses, awaited, how.app, role=pushed.role)


def check_format(fmt: str) -> None:
    if fmt not in ("table", "json", "yaml"):
        output.fail(f"-o {fmt!r}: use table, json or yaml", exit_code=output.EXIT_USAGE)


def push_request(
    artifacts: dict[str, Path | None],
    *,
    url: str | None,
    protocol: str,
    version: int | None,
    name: str | None,
    param: list[str] | None,
    by_reference: bool,
    description: str,
) -> versions.PushRequest:
    """What the artifact options ask for; a usage error unless exactly one source is given."""
    if sum(1 for source in (*artifacts.values(), url) if source is not None) != 1:
        output.fail(
            "give exactly one of --saved-model, --keras, --onnx or --url",
            exit_code=output.EXIT_USAGE,
        )
    if protocol not in PROTOCOLS:
        output.fail(f"unknown protocol {protocol!r}: use v1 or v2", exit_code=output.EXIT_USAGE)
    return versions.PushRequest(
        artifact=next(((form, path) for form, path in artifacts.items() if path), None),
        url=url,
        protocol=protocol,
        version=version,
        name=name,
        parameters=_params(param or []),
        by_reference=by_reference,
        description=description,
    )


def local_target() -> targets.Target | None:
    """Where ``resolve`` finds applications: the local state (``run`` and ``deploy``)."""
    try:
        return backends.get_target("local", home=store.home().root)
    except targets.TargetError:
        return None


def resolve(
    target: str, bootstrap_servers: str | None, registry: str | None
) -> tuple[Application, str]:
    """The application and its bootstrap servers, with ``--registry`` applied."""
    app, bootstrap = apps.resolve(target, bootstrap_servers)
    return (registry_opts.with_registry(app, registry) if registry else app), bootstrap


@contextlib.contextmanager
def push_errors() -> Iterator[None]:
    """What stops a push, a registry that refuses (a schema not registered) or cannot be
    reached: a sentence."""
    try:
        yield
    except versions.ModelPushError as exc:
        output.fail(str(exc), hint=exc.hint)
    except (RegistryError, RegistryUnavailable) as exc:
        output.fail(str(exc))


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            output.fail(f"--param {pair!r}: expected key=value", exit_code=output.EXIT_USAGE)
        out[key] = value
    return out
