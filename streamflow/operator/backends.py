"""Which backend runs applications: the factory the CLI asks for a :class:`Target`.

It sits above both backends (it imports them) so that they, and the shared
target layer under them (:mod:`streamflow.operator.targets`), never import
it: the backends depend on the shared layer and never the reverse. The
kubernetes backend is imported by name, when asked for, because it needs the
optional ``k8s`` extra.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import cast

from streamflow.operator.local import store
from streamflow.operator.targets import Target, TargetError

__all__ = ["KINDS", "get_target"]

KINDS = ("local", "kubernetes")


def get_target(
    kind: str = "local",
    *,
    home: Path | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    image: str | None = None,
) -> Target:
    """The target of that kind; ``home`` is the local target's state dir.

    ``kubeconfig``, ``context``, ``namespace`` and ``image`` are for the
    kubernetes target (None: its defaults).
    """
    if kind == "local":
        from streamflow.operator.local.target import LocalTarget

        return LocalTarget(home=(home or store.default_root()).resolve())
    if kind == "kubernetes":
        return _kubernetes(kubeconfig=kubeconfig, context=context, namespace=namespace, image=image)
    raise TargetError(f"unknown target {kind!r}", hint=f"use one of: {', '.join(KINDS)}")


def _kubernetes(**options: str | None) -> Target:
    """The Kubernetes target, from ``streamflow.operator.kubernetes.target``.

    That module provides ``KubernetesTarget(*, kubeconfig, context, namespace,
    image)`` implementing :class:`Target`; without the ``k8s`` extra this is a
    clear error.
    """
    try:
        module = importlib.import_module("streamflow.operator.kubernetes.target")
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.startswith("streamflow."):
            raise TargetError(
                "the kubernetes target is not available yet in this version of streamflow",
                hint="deploy with --target local (the default)",
            ) from None
        if missing.split(".")[0] in ("kopf", "kubernetes"):
            raise TargetError(
                f"the kubernetes target needs the {missing.split('.')[0]!r} package",
                hint="install streamflow with the k8s extra: pip install 'streamflow[k8s]'",
            ) from None
        raise
    return cast(Target, module.KubernetesTarget(**options))
