"""``streamflow operator run`` and ``streamflow operator manifests``: the Kubernetes operator.

``run`` is what the operator's pod runs (and what a developer runs against a
cluster from a laptop): a kopf operator for StreamflowApplication resources
in one namespace, or several, or all. ``manifests`` prints what installs it
(the CRD, RBAC and the operator's Deployment) for ``kubectl apply -f -``, and
with ``--monitoring`` the dashboards and alerts too.
The Kubernetes modules are imported inside the commands, so the rest of the
CLI works without the ``k8s`` extra installed.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from streamflow.cli import output, ui_cmds

__all__ = ["register"]

operator_app = typer.Typer(
    help="The Kubernetes operator: run it, or print the manifests that install it.",
    no_args_is_help=True,
)

_EXTRA_HINT = "install streamflow with the k8s extra: pip install 'streamflow[k8s]'"


@operator_app.command("run")
def run(
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            "-n",
            envvar="STREAMFLOW_NAMESPACE",
            help="A namespace to watch (repeatable; default: the context's, or the pod's).",
        ),
    ] = None,
    all_namespaces: Annotated[
        bool,
        typer.Option("--all-namespaces", "-A", help="Watch every namespace (needs a ClusterRole)."),
    ] = False,
    kubeconfig: Annotated[
        str | None, typer.Option(help="The kubeconfig file (default: in-cluster, or the usual).")
    ] = None,
    context: Annotated[str | None, typer.Option(help="The kubeconfig context to use.")] = None,
    resync: Annotated[
        float, typer.Option(min=1.0, help="Seconds between full resyncs of each application.")
    ] = 60.0,
    liveness: Annotated[
        str | None,
        typer.Option(help="Serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz."),
    ] = None,
    allowed_images: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-images",
            envvar="STREAMFLOW_ALLOWED_IMAGES",
            help="Refuse applications whose image matches none of these (repeatable): a glob "
            "(ghcr.io/acme/*) or a prefix that ends at /, : or @ "
            "(registry.internal/streamflow admits registry.internal/streamflow:1.2); a prefix "
            "without a / is a registry host, matched up to the / only (registry.internal "
            "does not admit registry.internal:5000/...). Default: the registry of the "
            "operator's own image (--operator-image ghcr.io/acme/streamflow:1 admits "
            "ghcr.io/acme/...), and no image when that is unknown or on Docker Hub. "
            "'*' admits any image.",
        ),
    ] = None,
    operator_image: Annotated[
        str | None,
        typer.Option(
            "--operator-image",
            envvar="STREAMFLOW_OPERATOR_IMAGE",
            help="The image this operator runs from, whose registry --allowed-images defaults "
            "to (the manifests set STREAMFLOW_OPERATOR_IMAGE to the Deployment's image).",
        ),
    ] = None,
    ui_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve the read-only web view (`streamflow ui`) of the namespace's applications "
            "on this port (default: off; the manifests use 8081, on 127.0.0.1: reach it with "
            "kubectl port-forward deploy/streamflow-operator 8765:8081).",
        ),
    ] = None,
    ui_host: Annotated[
        str,
        typer.Option(
            help="The address the web view listens on. Anything but loopback needs "
            "--ui-token-env: the view shows every application's dead letters.",
        ),
    ] = "127.0.0.1",
    ui_token_env: Annotated[
        str | None,
        typer.Option(
            help="The environment variable holding the web view's token; every request must "
            "carry it (a browser opens /?token=... once, scripts send a Bearer header).",
        ),
    ] = None,
    ui_allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--ui-allowed-host",
            help="A Host name the web view answers when it listens beyond loopback "
            "(repeat it; default: any). On loopback only loopback names are answered.",
        ),
    ] = None,
    verify_in: Annotated[
        str,
        typer.Option(
            "--verify-in",
            envvar="STREAMFLOW_VERIFY_IN",
            help="Where each application's spec is verified: job (a short-lived Job from the "
            "application's own image, which holds its code: what a cluster needs) or operator "
            "(a child process of the operator, which must then see the applications' code, "
            "as when it runs beside the project).",
        ),
    ] = "job",
    log_format: Annotated[str, typer.Option(help="plain, full or json.")] = "full",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Reconcile StreamflowApplications until SIGTERM or Ctrl-C."""
    try:
        import kopf

        from streamflow.operator.kubernetes import admission, names
        from streamflow.operator.kubernetes.client import KubeAccess, KubeError
        from streamflow.operator.kubernetes.runner import VERIFY_IN, Operator
    except ImportError as exc:
        output.fail(f"the operator needs {exc.name!r}", hint=_EXTRA_HINT)
    if verify_in not in VERIFY_IN:
        output.fail(f"--verify-in {verify_in!r}: use job or operator", exit_code=output.EXIT_USAGE)
    formats = {
        "plain": kopf.LogFormat.PLAIN,
        "full": kopf.LogFormat.FULL,
        "json": kopf.LogFormat.JSON,
    }
    if log_format not in formats:
        output.fail(
            f"--log-format {log_format!r}: use plain, full or json", exit_code=output.EXIT_USAGE
        )
    given = [pattern.strip() for pattern in allowed_images or ()]
    if any(not pattern for pattern in given):
        output.fail(
            "--allowed-images: an empty pattern admits nothing",
            hint=f"name a registry or repository, or '{admission.ANY_IMAGE}' for any image",
            exit_code=output.EXIT_USAGE,
        )
    patterns = admission.allowed_images(given, own_image=operator_image)
    ui_access = _ui_access(ui_port, ui_host, ui_token_env, ui_allowed_hosts)
    access = KubeAccess(kubeconfig=kubeconfig, context=context)
    try:
        version = access.check(group=names.GROUP, version=names.VERSION)
        operator = Operator(
            access=access,
            namespaces=namespace or (),
            clusterwide=all_namespaces,
            resync_s=resync,
            liveness_endpoint=liveness,
            allowed_images=patterns,
            verify_in=verify_in,
        )
    except KubeError as exc:
        output.fail(str(exc))
    kopf.configure(verbose=verbose, log_format=formats[log_format])
    if not verbose:  # kopf reports every handler call; what the operator did is logged anyway
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    where = "all namespaces" if all_namespaces else ", ".join(operator.namespaces)
    log = logging.getLogger("streamflow.operator")
    log.info("streamflow operator on Kubernetes %s, watching %s", version, where)
    # A warning when it admits no image (nothing will run) or any (anyone's code will).
    wide_open_or_shut = not patterns or admission.ANY_IMAGE in patterns
    log.log(
        logging.WARNING if wide_open_or_shut else logging.INFO,
        "%s",
        admission.describe_allowed_images(given, own_image=operator_image),
    )
    ui = (
        _start_ui(
            ui_port,
            kubeconfig,
            context,
            operator.namespaces,
            host=ui_host,
            access=ui_access,
        )
        if ui_port
        else None
    )
    try:
        operator.run()
    finally:
        if ui is not None:
            ui.stop()


def _ui_access(port: int | None, host: str, token_env: str | None, hosts: list[str] | None) -> Any:
    """The web view's access, checked before anything starts: never exposed without a token."""
    from streamflow.operator import web

    access = ui_cmds.ui_access(token_env, hosts, flag="--ui-token-env")
    if port:
        try:
            web.check_exposure(host, access)
        except web.UiError as exc:
            output.fail(str(exc))
    return dataclasses.replace(access, import_code=False)


def _start_ui(
    port: int,
    kubeconfig: str | None,
    context: str | None,
    namespaces: list[str],
    *,
    host: str,
    access: Any,
) -> Any:
    """The web view beside the operator, with the kubernetes target in its (first) namespace.

    It never imports an application's classes: the operator holds the rights to every
    application's Secret, and must not run their code.
    """
    from streamflow.operator import backends, targets, web

    try:
        target = backends.get_target(
            "kubernetes",
            kubeconfig=kubeconfig,
            context=context,
            namespace=namespaces[0] if namespaces else None,
        )
        running = web.serve_in_background(target, host=host, port=port, access=access)
    except targets.TargetError as exc:
        output.fail(exc.message, hint=exc.hint)
    except web.UiError as exc:
        output.fail(str(exc))
    logging.getLogger("streamflow.operator").info(
        "the web view listens on %s port %d%s",
        host,
        port,
        ", with a token" if access.token else " (loopback: kubectl port-forward to reach it)",
    )
    return running


@operator_app.command("manifests")
def manifests(
    image: Annotated[
        str | None,
        typer.Option(
            help="The operator's own image (default: streamflow:<version>). Each application "
            "names its streamlets' image itself: `streamflow deploy --image REF`."
        ),
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Where the operator and its apps live.")
    ] = "default",
    output_dir: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="Write crd.yaml, rbac.yaml, operator-deployment.yaml."),
    ] = None,
    monitoring: Annotated[
        bool,
        typer.Option(
            help="Also the dashboards and alerts: a PrometheusRule (prometheus-operator) and a "
            'ConfigMap with the Grafana dashboard (label grafana_dashboard: "1"); with '
            "--output-dir, the plain files monitoring/alerts.yaml and "
            "monitoring/grafana-dashboard.json.",
        ),
    ] = False,
    expose_ui: Annotated[
        bool,
        typer.Option(
            help="Serve the web view to the cluster, not only to kubectl port-forward: a "
            "Service, a NetworkPolicy admitting pods labelled streamflow.io/ui-client=true, "
            "and a token from the Secret streamflow-ui-token (key token), which you create.",
        ),
    ] = False,
) -> None:
    """Print the CRD, RBAC (ServiceAccount, Role, RoleBinding) and the operator's Deployment.

    The web view listens on the operator pod's 127.0.0.1: kubectl port-forward
    deploy/streamflow-operator 8765:8081, then open http://localhost:8765. With
    --monitoring, also the Prometheus alerts and the Grafana dashboard.
    """
    try:
        from streamflow.operator.kubernetes import manifests as manifests_mod
        from streamflow.operator.kubernetes import monitoring as monitoring_mod
    except ImportError as exc:
        output.fail(f"the manifests need {exc.name!r}", hint=_EXTRA_HINT)
    found = manifests_mod.files(
        namespace=namespace, image=image or manifests_mod.DEFAULT_IMAGE, expose_ui=expose_ui
    )
    if output_dir is None:
        if monitoring:
            found["monitoring.yaml"] = monitoring_mod.render(namespace=namespace)
        typer.echo("---\n".join(found.values()), nl=False)
        return
    if monitoring:
        found.update(monitoring_mod.files())
    for name, text in found.items():
        (output_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (output_dir / name).write_text(text)
        output.error_console().print(f"wrote {output_dir / name}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(operator_app, name="operator")
