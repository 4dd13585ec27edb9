"""``streamflow build``: an application's image or the operator's, after Cloudflow's buildApp.

``streamflow build BLUEPRINT`` verifies the blueprint, then builds two images
with whichever builder is on PATH (buildah, podman or docker): the
**streamflow image** (streamflow with the ``k8s`` extra in a venv at
/opt/streamflow, on ``--base-image``) and, on it, the **application image**
(the extras the streamlets need, worked out from their classes and config,
e.g. TensorFlow for Keras serving, and the project itself under ``/app``, less
what the project's ``.dockerignore`` excludes). ``streamflow build
--operator`` builds the streamflow image alone: what ``streamflow operator
manifests --image`` runs.

Only the reference to deploy goes to stdout, so ``IMAGE=$(streamflow build
...)`` works; progress goes to stderr, including the streamflow image's
reference during an application build, for ``operator manifests --image``.
``--push`` pushes that reference with the builder that made it (buildah from
streamflow's own storage, where ``docker push`` cannot see it). The planning,
builders and wheelhouse are in :mod:`streamflow.cli.images`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streamflow.blueprint import paths
from streamflow.cli import output
from streamflow.cli.images import builders, plans

__all__ = ["build", "register"]


def _parse_output(text: str | None) -> tuple[str, Path] | None:
    if text is None:
        return None
    kind, sep, path = text.partition(":")
    if not sep or kind not in ("oci-archive", "docker-archive") or not path:
        output.fail(
            f"--output {text!r}: expected oci-archive:PATH or docker-archive:PATH",
            exit_code=output.EXIT_USAGE,
        )
    return kind, Path(path).resolve()


def _check_usage(
    blueprint: Path | None, *, operator: bool, root: Path | None, extras: str | None
) -> None:
    """Exactly one of BLUEPRINT and --operator; the application's options only with a blueprint."""
    if operator and blueprint is not None:
        output.fail(
            "give a BLUEPRINT or --operator, not both",
            hint="an application's build makes the streamflow image too, and prints its "
            "reference on stderr",
            exit_code=output.EXIT_USAGE,
        )
    if not operator and blueprint is None:
        output.fail(
            "nothing to build: give a BLUEPRINT (the application's image) or --operator "
            "(the streamflow image the operator runs)",
            hint="streamflow build blueprints/wine/classifier.yaml, or streamflow build --operator",
            exit_code=output.EXIT_USAGE,
        )
    if operator:
        given = [name for name, value in (("--root", root), ("--extras", extras)) if value]
        if given:
            output.fail(
                f"{' and '.join(given)} apply to an application's image, not to --operator",
                exit_code=output.EXIT_USAGE,
            )


def _describe(plan: plans.Plan, blueprint: Path) -> None:
    """The plan's progress lines: the operator's image, the files, the extras and why."""
    sf = plan.streamflow
    builders.say(f"the operator's image (operator manifests --image): {sf.image}")
    if plan.application is None:
        return
    application = plan.application
    workdir = (
        Path(plans.APP_ROOT) / blueprint.resolve().parent.relative_to(application.root)
    ).as_posix()
    builders.say(
        f"application {application.app.name}: {len(application.files)} files of "
        f"{application.root} go to {plans.APP_ROOT}; pods run in {workdir}"
    )
    for extra, reason in application.extras.items() or [("(none)", "no streamlet needs one")]:
        builders.say(f"extra {extra}: {reason}")
    _warn_on_another_root(application.root, blueprint.resolve().parent, workdir)


def _warn_on_another_root(root: Path, where: Path, workdir: str) -> None:
    """deploy names the blueprint's directory from the nearest project root: it has no --root."""
    nearest = paths.find_project_root(start=where)
    if nearest == root:
        return
    if nearest is None:
        builders.say(
            f"warning: deploy finds no project above {where} (no pyproject.toml or .git), "
            f"so it will refuse this application; add a pyproject.toml to {root}"
        )
        return
    deployed = (Path(plans.APP_ROOT) / where.relative_to(nearest)).as_posix()
    builders.say(
        f"warning: --root {root} is not the project deploy uses ({nearest}, the nearest "
        f"with pyproject.toml or .git): its pods would run in {deployed}, not {workdir}; "
        "build without --root so that both agree"
    )


def _print_commands(
    plan: plans.Plan, builder: builders.Builder, archive: tuple[str, Path] | None, *, push: bool
) -> None:
    builders.say(
        f"requirements: {' '.join(plan.requirements)} (wheels made here, installed --no-index)"
    )
    for step in plans.steps(plan, builder):
        print(f"# {step.what}\n{' '.join(step.command)}")
    if plan.tag:
        print(f"# tag\n{' '.join(builder.tag(plan.built, plan.tag))}")
    if archive:
        print(f"# archive\n{' '.join(builder.save(plan.reference, *archive))}")
    if push:
        print(f"# push\n{' '.join(builder.push(plan.reference))}")


def build(
    blueprint: Annotated[
        Path | None,
        typer.Argument(
            help="The application's blueprint (YAML); leave it out with --operator.",
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    operator: Annotated[
        bool,
        typer.Option(
            "--operator",
            help="Build only the streamflow image, what the operator runs (streamflow operator "
            "manifests --image), and print its reference.",
        ),
    ] = False,
    tag: Annotated[
        str | None,
        typer.Option(
            help="Also tag the image with this reference, and print it (default: print "
            "localhost/streamflow/APP:CONTENT-HASH, or localhost/streamflow:VERSION-HASH "
            "with --operator)."
        ),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(
            help="The project directory that becomes /app (default: the nearest with "
            "pyproject.toml or .git).",
            file_okay=False,
            exists=True,
        ),
    ] = None,
    builder_name: Annotated[
        str | None,
        typer.Option("--builder", help="buildah, podman or docker (default: the first on PATH)."),
    ] = None,
    base_image: Annotated[
        str | None,
        typer.Option(
            help=f"The streamflow image's base (default: {plans.LOCAL_BASE} if it exists, "
            f"else {plans.PUBLIC_BASE})."
        ),
    ] = None,
    extras: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated streamflow extras instead of the ones worked out (tf, onnx, ...)."
        ),
    ] = None,
    output_: Annotated[
        str | None,
        typer.Option(
            "--output",
            help="Also write the image to oci-archive:PATH or docker-archive:PATH (for "
            "ctr -n k8s.io images import PATH).",
        ),
    ] = None,
    push: Annotated[
        bool,
        typer.Option(
            help="Push the image (the --tag reference, so give one that names a registry) "
            "with the same builder and its storage."
        ),
    ] = False,
    rebuild: Annotated[
        bool, typer.Option(help="Build even if an image with the same content tag exists.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Print the plan and the commands; build nothing.")
    ] = False,
) -> None:
    """Build the application's container image (streamflow, its extras and the project under /app).

    With --operator, build only the streamflow image that the operator runs.
    Prints the image reference to deploy on stdout; progress goes to stderr.
    """
    _check_usage(blueprint, operator=operator, root=root, extras=extras)
    archive = _parse_output(output_)
    if builder_name is not None and builder_name not in builders.BUILDERS:
        output.fail(
            f"--builder {builder_name!r}: expected one of {', '.join(builders.BUILDERS)}",
            exit_code=output.EXIT_USAGE,
        )
    builder = builders.find_builder(builder_name, storage=builders.images_dir())
    if blueprint is None:
        plan = plans.plan_operator(tag=tag, base_image=base_image, builder=builder)
    else:
        chosen = None if extras is None else [e.strip() for e in extras.split(",") if e.strip()]
        plan = plans.make_plan(
            blueprint, root=root, tag=tag, base_image=base_image, builder=builder, extras=chosen
        )
    _describe(plan, blueprint or Path.cwd())
    if dry_run:
        _print_commands(plan, builder, archive, push=push)
        return
    plans.run_build(plan, builder, archive=archive, rebuild=rebuild)
    if push:
        builders.push(builder, plan.reference)
    print(plan.reference)


def register(app: typer.Typer) -> None:
    app.command("build")(build)
