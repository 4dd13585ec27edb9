"""Where a deploy-family command acts: its four target options, declared once.

``deploy``, ``undeploy``, ``list``, ``status``, ``scale``, ``configure``,
``configuration``, ``logs`` and ``ui`` each take ``--target``, ``--kubeconfig``,
``--context`` and ``--namespace``. A command says so by taking one parameter,
``where: TargetChoice``, under :func:`with_target`: the decorator puts the four
options in that parameter's place (so ``--help`` keeps the command's order) and
hands the command one :class:`TargetChoice`, which opens the target.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from streamflow.cli import deploy_views as views
from streamflow.cli import rollout
from streamflow.operator import backends, targets
from streamflow.operator.local import store

__all__ = ["LOCAL", "TargetChoice", "TargetKind", "with_target"]


class TargetKind(enum.StrEnum):
    local = "local"
    kubernetes = "kubernetes"


@dataclass(frozen=True)
class TargetChoice:
    """The target a command was pointed at, from its four options."""

    kind: TargetKind = TargetKind.local
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None

    @property
    def local(self) -> bool:
        return self.kind is TargetKind.local

    def open(self, *, image: str | None = None) -> targets.Target:
        """The target itself; on ``local``, a warning names the Kubernetes options given."""
        if self.local:
            given = (("--kubeconfig", self.kubeconfig), ("--context", self.context),
                     ("--namespace", self.namespace), ("--image", image))  # fmt: skip
            ignored = [flag for flag, value in given if value]
            if ignored:
                views.print_warnings(
                    [f"{', '.join(ignored)}: only for --target kubernetes; ignored"]
                )
            return rollout.attempt(lambda: backends.get_target("local", home=store.home().root))
        options: dict[str, Any] = {
            "kubeconfig": self.kubeconfig,
            "context": self.context,
            "namespace": self.namespace,
        }
        if image:
            options["image"] = image
        return rollout.attempt(lambda: backends.get_target("kubernetes", **options))


LOCAL = TargetChoice()

_OPTIONS: tuple[tuple[str, Any], ...] = (
    (
        "target",
        Annotated[
            TargetKind,
            typer.Option(
                "--target",
                "-t",
                help="local (processes on this machine; the default) or kubernetes.",
            ),
        ],
    ),
    (
        "kubeconfig",
        Annotated[
            str | None,
            typer.Option(help="kubernetes: the kubeconfig file (default: the usual one)."),
        ],
    ),
    (
        "context",
        Annotated[
            str | None,
            typer.Option(help="kubernetes: the kube context (default: the current one)."),
        ],
    ),
    (
        "namespace",
        Annotated[
            str | None,
            typer.Option(
                "--namespace", "-n", help="kubernetes: the namespace (default: the context's)."
            ),
        ],
    ),
)
_DEFAULTS = {"target": TargetKind.local, "kubeconfig": None, "context": None, "namespace": None}

F = TypeVar("F", bound=Callable[..., Any])


def with_target(command: F) -> F:
    """``command(..., where: TargetChoice, ...)`` as a command with the four target options
    in ``where``'s place; it is called with ``where`` made from them."""
    signature = inspect.signature(command, eval_str=True)
    if "where" not in signature.parameters:
        raise TypeError(f"{command.__name__} takes no `where: TargetChoice` parameter")
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "where":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(
                name,
                parameter.kind,
                default=_DEFAULTS[name],
                annotation=annotation,
            )
            for name, annotation in _OPTIONS
        ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        where = TargetChoice(
            kind=kwargs.pop("target", TargetKind.local),
            kubeconfig=kwargs.pop("kubeconfig", None),
            context=kwargs.pop("context", None),
            namespace=kwargs.pop("namespace", None),
        )
        return command(*args, where=where, **kwargs)

    new = signature.replace(parameters=parameters)
    wrapper.__signature__ = new  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in new.parameters.values()}
    wrapper.__annotations__["return"] = signature.return_annotation
    return wrapper  # type: ignore[return-value]
