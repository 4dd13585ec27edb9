"""What a build makes, worked out before anything runs, and the build that carries it out.

Two images, each with a content tag (a hash of everything that goes into it),
so an unchanged image is "up to date" in seconds and a changed one gets a new
tag that a Deployment rolls to:

* the **streamflow image** (``Dockerfile`` here): streamflow with the ``k8s``
  extra in a venv at /opt/streamflow, on the base image. The operator runs it
  (``streamflow operator manifests --image``), and applications build on it;
* the **application image** (``Dockerfile.streamlets`` here): that image, plus
  the extras the streamlets need and the project under ``/app``.

The Dockerfiles are package data, so a plain ``pip install streamflow`` can
build. Contexts are written under ``images_dir()``, never in the project.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import typer

import streamflow
from streamflow.blueprint import paths, verify_file
from streamflow.blueprint.model import Application
from streamflow.cli import output
from streamflow.cli.images import builders, context, wheels

__all__ = [
    "APP_DOCKERFILE",
    "APP_ROOT",
    "LOCAL_BASE",
    "PUBLIC_BASE",
    "STREAMFLOW_DOCKERFILE",
    "AppPlan",
    "Plan",
    "Step",
    "StreamflowPlan",
    "make_plan",
    "plan_operator",
    "run_build",
    "steps",
]

APP_ROOT = "/app"
LOCAL_BASE = "localhost/streamflow-base:bookworm"
PUBLIC_BASE = "docker.io/library/python:3.11-slim"
STREAMFLOW_DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile"
APP_DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile.streamlets"
#: What the streamflow image installs (and all an operator-only build needs wheels for).
STREAMFLOW_REQUIREMENT = "streamflow[k8s]"


@dataclass(frozen=True)
class StreamflowPlan:
    """The streamflow image: what the operator and every streamlet pod run."""

    source: Path | None  # the checkout its wheel is built from; None: the index's
    base_image: str
    image: str  # localhost/streamflow:VERSION-HASH
    digest: str
    wheel_digest: str  # the package's files alone: what its wheel is made from

    @property
    def stable(self) -> str:
        """The tag that follows the newest build of this version."""
        return f"localhost/streamflow:{streamflow.__version__}"


@dataclass(frozen=True)
class AppPlan:
    """The application's part: the project that goes to /app and the extras it needs."""

    app: Application
    root: Path
    files: list[str]
    extras: dict[str, str]
    image: str  # the content tag


@dataclass(frozen=True)
class Plan:
    """Everything a build needs (what --dry-run shows); no application: the streamflow image."""

    streamflow: StreamflowPlan
    application: AppPlan | None
    requirements: list[str]
    wheels_key: wheels.Keys
    tag: str | None

    @property
    def built(self) -> str:
        """The content tag of the image asked for."""
        return self.application.image if self.application else self.streamflow.image

    @property
    def reference(self) -> str:
        """What the build prints: ``--tag``, else the content tag."""
        return self.tag or self.built

    @property
    def contexts(self) -> Path:
        # "_operator" is no application's name: those are Kubernetes names, without "_"
        name = self.application.app.name if self.application else "_operator"
        return builders.images_dir() / "contexts" / name


@dataclass(frozen=True)
class Step:
    """One image to build: skipped when its content tag exists (unless --rebuild)."""

    what: str
    image: str
    command: list[str]


def _plan_streamflow(builder: builders.Builder, base_image: str | None) -> StreamflowPlan:
    source = wheels.streamflow_source()
    package = Path(streamflow.__file__).resolve().parent
    if source is not None and not (package / "operator/web/static/index.html").is_file():
        builders.say(
            "warning: the web view's page is not built (./dev setup builds it); the image has no UI"
        )
    if base_image is None:
        base_image = LOCAL_BASE if builders.has_local_image(builder, LOCAL_BASE) else PUBLIC_BASE
    # the wheel takes the whole package (the built web page too), whatever .dockerignore says
    files = [
        f"streamflow/{f}" for f in context.project_files(package, ["**/__pycache__", "**/*.pyc"])
    ]
    root = package.parent
    if source is not None:
        files += ["pyproject.toml", "README.md"]  # the wheel's metadata
    parts = [STREAMFLOW_DOCKERFILE.read_text(), base_image, builders.image_id(builder, base_image)]
    if source is None:  # the installed files stand for the index's wheel of this version
        parts.append(f"streamflow=={streamflow.__version__} from the index")
    wheel_digest = context.digest(root, sorted(files))
    digest = context.digest(root, [], *parts, wheel_digest)
    image = f"localhost/streamflow:{streamflow.__version__}-{digest[:12]}"
    return StreamflowPlan(source, base_image, image, digest, wheel_digest)


def _wheels_key(sf: StreamflowPlan, requirements: list[str]) -> wheels.Keys:
    return wheels.keys(sf.source, requirements, content=sf.wheel_digest)


def plan_operator(*, tag: str | None, base_image: str | None, builder: builders.Builder) -> Plan:
    """The streamflow image alone: what ``streamflow operator manifests --image`` runs."""
    sf = _plan_streamflow(builder, base_image)
    requirements = [STREAMFLOW_REQUIREMENT]
    return Plan(sf, None, requirements, _wheels_key(sf, requirements), tag)


def make_plan(
    blueprint: Path,
    *,
    root: Path | None,
    tag: str | None,
    base_image: str | None,
    builder: builders.Builder,
    extras: list[str] | None,
) -> Plan:
    """Verify the blueprint and work out the project, extras, images and tags."""
    result = verify_file(blueprint, require_registry=False)
    if result.application is None:
        output.print_problems(result.problems, to=output.error_console())
        raise typer.Exit(output.EXIT_INVALID)
    app = result.application
    where = blueprint.resolve().parent
    project = root.resolve() if root else paths.find_project_root(start=where)
    if project is None or not where.is_relative_to(project):
        output.fail(
            f"{blueprint} is not inside a project",
            hint="pass --root DIR: the project directory that goes to /app",
        )
    found = (
        {name: "asked for with --extras" for name in extras}
        if extras is not None
        else context.needed_extras(app)
    )
    requirements = context.requirements(project, found)
    files, outside = context.select(project, context.read_ignore(project))
    if outside:
        shown = ", ".join(outside[:5]) + (
            f" and {len(outside) - 5} more" if len(outside) > 5 else ""
        )
        output.error_console().print(
            f"[yellow]warning[/]: not copied to {APP_ROOT}: {shown}: a link that leads out of "
            f"{project} (the image would carry what it points at); copy the files in instead"
        )
    if not files:
        output.fail(f"{project}'s .dockerignore leaves nothing to copy to {APP_ROOT}")
    sf = _plan_streamflow(builder, base_image)
    app_hash = context.digest(project, files, APP_DOCKERFILE.read_text(), sf.image, *requirements)
    image = f"localhost/streamflow/{app.name}:{app_hash[:12]}"
    application = AppPlan(app, project, files, found, image)
    return Plan(sf, application, requirements, _wheels_key(sf, requirements), tag)


def steps(plan: Plan, builder: builders.Builder) -> list[Step]:
    """The builds, in order: the streamflow image, then the application's (if any)."""
    sf = plan.streamflow
    done = [
        Step(
            "streamflow image",
            sf.image,
            builder.build(
                dockerfile=STREAMFLOW_DOCKERFILE,
                context=plan.contexts / "streamflow",
                tags=[sf.image, sf.stable],
                args={"BASE_IMAGE": sf.base_image},
            ),
        )
    ]
    if plan.application is not None:
        command = builder.build(
            dockerfile=APP_DOCKERFILE,
            context=plan.contexts / "app",
            tags=[plan.application.image],
            args={"STREAMFLOW_IMAGE": sf.image},
        )
        done.append(Step("application image", plan.application.image, command))
    return done


def _write_contexts(plan: Plan, found: list[Path]) -> None:
    shutil.rmtree(plan.contexts, ignore_errors=True)
    for wheel in found:
        wheels.link_tree(wheel.parent, [wheel.name], plan.contexts / "streamflow" / "wheels")
    if plan.application is not None:
        app = plan.contexts / "app"
        for wheel in found:
            wheels.link_tree(wheel.parent, [wheel.name], app / "wheels")
        (app / "requirements.txt").write_text("\n".join(plan.requirements) + "\n")
        wheels.link_tree(plan.application.root, plan.application.files, app / "app")


def run_build(
    plan: Plan,
    builder: builders.Builder,
    *,
    archive: tuple[str, Path] | None,
    rebuild: bool,
) -> None:
    """Build what is missing (or everything, with ``rebuild``), tag it, write the archive."""
    todo = [s for s in steps(plan, builder) if rebuild or not builders.has_image(builder, s.image)]
    try:  # the contexts hold hard links to the whole project: never left behind
        if todo:
            found = wheels.wheelhouse(plan.streamflow.source, plan.requirements, plan.wheels_key)
            _write_contexts(plan, found)
        for step in todo:
            builders.say(f"building the {step.what} {step.image} with {builder.name} ...")
            builders.run(step.command, what=step.what)
    finally:
        shutil.rmtree(plan.contexts, ignore_errors=True)
    if not todo:
        builders.say(f"{plan.built} is up to date")
    elif builder.name == "buildah":
        builders.prune(
            builder,
            current=[s.image for s in steps(plan, builder)],
            keep=[plan.tag] if plan.tag else [],
            keep_suffix=f":{streamflow.__version__}",
        )
    if plan.tag:
        builders.run(builder.tag(plan.built, plan.tag), what=f"tag {plan.tag}", quiet=True)
    if archive:
        builders.write_archive(builder, plan.reference, *archive)
