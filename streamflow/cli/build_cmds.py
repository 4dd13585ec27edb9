"""``streamflow build BLUEPRINT``: an application's image, in the spirit of Cloudflow's buildApp.

The blueprint is verified first; then two images are built with whichever
builder is on PATH (buildah, podman or docker):

* the **streamflow image** (``operator/Dockerfile``): streamflow with the
  ``k8s`` extra in a venv at /opt/streamflow, on ``--base-image``;
* the **application image** (``operator/Dockerfile.streamlets``): that image,
  plus the extras the streamlets need (worked out from their classes and
  config, e.g. TensorFlow for Keras serving) and the project itself under the
  application root ``/app``, less what the project's ``.dockerignore`` excludes.

Why wheels made on the host: pip runs here, where the index, its proxy and its
certificates are already configured, and its cache keeps TensorFlow from being
downloaded again; the build itself needs no network and installs with
``--no-index`` from a wheelhouse bind-mounted into the build, so no wheel and
no pip cache ends up in a layer. Why content tags: an image's default tag is a
hash of everything that goes into it, so an unchanged application is "up to
date" in seconds, and a changed one gets a new tag that a Deployment rolls to.

Builds happen in contexts written under ``$STREAMFLOW_IMAGES_DIR`` (default
``~/.cache/streamflow/images``), never in the project. buildah keeps its images
there too (vfs storage, chroot isolation: it works without a daemon, as root or
not), next to the base image that ``tools/images/build`` makes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

import streamflow
from streamflow.api import descriptor as descriptors
from streamflow.blueprint import paths, verify_file
from streamflow.blueprint.model import Application
from streamflow.cli import output

__all__ = [
    "APP_ROOT",
    "Builder",
    "find_builder",
    "ignored",
    "needed_extras",
    "project_files",
    "read_ignore",
    "register",
]

APP_ROOT = "/app"
LOCAL_BASE = "localhost/streamflow-base:bookworm"
PUBLIC_BASE = "docker.io/library/python:3.11-slim"
#: The Python of both bases; wheels made on a host with another Python are fetched for this one.
TARGET_PYTHON = (3, 11)
BUILDERS = ("buildah", "podman", "docker")


def images_dir() -> Path:
    """Where contexts, wheelhouses and buildah's storage live (never the project)."""
    explicit = os.environ.get("STREAMFLOW_IMAGES_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "streamflow" / "images"


def _say(message: str) -> None:
    print(f"build: {message}", file=sys.stderr, flush=True)


# -- .dockerignore -----------------------------------------------------------


def read_ignore(root: Path) -> list[str]:
    """The patterns of ``root/.dockerignore`` (none if it has none), comments dropped."""
    file = root / ".dockerignore"
    if not file.is_file():
        return []
    lines = (line.strip() for line in file.read_text(encoding="utf-8").splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith("#")]


def _matches(pattern: str, rel: str) -> bool:
    # Docker's rules: a pattern matches a path or any of its parents; ** spans directories
    regex = re.escape(pattern.lstrip("/")).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
    regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    return re.fullmatch(regex + "(?:/.*)?", rel) is not None


def ignored(rel: str, patterns: list[str]) -> bool:
    """Whether ``rel`` (a /-separated path) is excluded; the last matching pattern wins."""
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if _matches(pattern.removeprefix("!"), rel):
            result = not negated
    return result


def project_files(root: Path, patterns: list[str]) -> list[str]:
    """Every file under ``root`` that the patterns keep, sorted; symlinks to files count."""
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        base = Path(directory).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        # a pruned directory is never walked (.venv alone is gigabytes), unless a ! may reopen it
        reopen = any(p.startswith("!") for p in patterns)
        dirs[:] = sorted(d for d in dirs if reopen or not ignored(prefix + d, patterns))
        found += [prefix + f for f in files if not ignored(prefix + f, patterns)]
    return sorted(f for f in found if (root / f).is_file())


# -- what the streamlets need --------------------------------------------------


def needed_extras(app: Application) -> dict[str, str]:
    """The streamflow extras the application's streamlets need, each with the reason why.

    Serving needs the runtime of the models it is given: the blueprint's own
    ModelPublisher says which (keras, saved_model: tf; onnx: onnx); without
    one, tf, the embedded kind a model push sends by default.
    """
    from streamflow.streamlets.serving import ModelPublisher
    from streamflow.streamlets.serving.follower import ModelFollower

    for directory in app.python_paths:
        descriptors.ensure_on_path(directory)
    extras: dict[str, str] = {}
    followers: list[str] = []
    for name, spec in app.streamlets.items():
        cls = descriptors.load_streamlet_class(spec.class_path)
        modules = {klass.__module__ for klass in cls.__mro__}
        if any(m.startswith("streamflow.streamlets.drift") for m in modules):
            extras.setdefault("drift", f"{name} detects drift")
        if any(m.startswith("streamflow.streamlets.explain") for m in modules):
            extras.setdefault("explain", f"{name} explains predictions")
        if issubclass(cls, ModelPublisher):
            for key, extra in (("keras", "tf"), ("saved_model", "tf"), ("onnx", "onnx")):
                if spec.config.get(key):
                    extras.setdefault(extra, f"{name} publishes a {key} model")
        elif issubclass(cls, ModelFollower):
            followers.append(name)
    if followers and not {"tf", "onnx"} & extras.keys():
        extras["tf"] = f"{followers[0]} serves models (Keras/SavedModel by default)"
    if app.uses_registry:
        extras["registry"] = "a topic uses the schema registry"
    return dict(sorted(extras.items()))


def streamflow_source() -> Path | None:
    """The checkout streamflow runs from (an editable install), if it is one."""
    root = Path(streamflow.__file__).resolve().parent.parent
    dockerfiles = (root / "operator" / "Dockerfile", root / "operator" / "Dockerfile.streamlets")
    if (root / "pyproject.toml").is_file() and all(f.is_file() for f in dockerfiles):
        return root
    return None


def _digest(root: Path, files: list[str], *extra: str) -> str:
    h = hashlib.sha256()
    for text in extra:
        h.update(text.encode() + b"\0")
    for rel in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()


# -- builders ------------------------------------------------------------------


@dataclass(frozen=True)
class Builder:
    """One image builder's command lines; buildah's are pinned to streamflow's own storage."""

    name: str
    exe: str
    storage: Path | None = None

    def _base(self) -> list[str]:
        if self.name == "buildah" and self.storage is not None:
            return [
                self.exe,
                "--root",
                str(self.storage / "storage"),
                "--runroot",
                str(self.storage / "run"),
                "--storage-driver",
                "vfs",
            ]
        return [self.exe]

    def build(
        self, *, dockerfile: Path, context: Path, tags: list[str], args: dict[str, str]
    ) -> list[str]:
        verb = ["bud", "--isolation", "chroot"] if self.name == "buildah" else ["build"]
        command = [*self._base(), *verb, "-f", str(dockerfile)]
        for key, value in args.items():
            command += ["--build-arg", f"{key}={value}"]
        for tag in tags:
            command += ["-t", tag]
        return [*command, str(context)]

    def exists(self, image: str) -> list[str]:
        if self.name == "buildah":
            return [*self._base(), "inspect", "--type", "image", image]
        return [*self._base(), "image", "inspect", image]

    def save(self, image: str, kind: str, path: Path) -> list[str]:
        if self.name == "buildah":
            return [*self._base(), "push", image, f"{kind}:{path}:{image}"]
        if self.name == "podman":
            return [*self._base(), "save", "--format", kind, "-o", str(path), image]
        return [*self._base(), "save", "-o", str(path), image]  # docker writes docker-archive


def find_builder(choice: str | None, *, storage: Path) -> Builder:
    """The builder to use: ``choice``, or the first of buildah, podman, docker on PATH."""
    for name in (choice,) if choice else BUILDERS:
        exe = shutil.which(name)
        if exe:
            return Builder(name, exe, storage if name == "buildah" else None)
    wanted = choice or "an image builder"
    output.fail(
        f"{wanted} is not on PATH",
        hint="install buildah (apt-get install buildah), podman or docker; "
        "tools/images/build installs buildah and makes the base image",
    )


def _run(command: list[str], *, what: str, quiet: bool = False) -> None:
    started = time.monotonic()
    result = subprocess.run(command, capture_output=quiet, text=True, check=False)
    if result.returncode != 0:
        if quiet:
            sys.stderr.write((result.stdout or "") + (result.stderr or ""))
        output.fail(f"{what} failed (exit {result.returncode})", hint=" ".join(command))
    _say(f"{what}: done in {time.monotonic() - started:.0f} s")


def _has_image(builder: Builder, image: str) -> bool:
    return subprocess.run(builder.exists(image), capture_output=True, check=False).returncode == 0


def _link_tree(source: Path, files: list[str], target: Path) -> None:
    for rel in files:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source / rel, dest)
        except OSError:  # another filesystem: copy
            shutil.copy2(source / rel, dest)


def _wheelhouse(source: Path, requirements: list[str], key: str) -> Path:
    """Wheels for ``requirements`` (streamflow's own built from ``source``), made once per key."""
    house = images_dir() / "wheels" / key
    if (house / ".complete").is_file():
        return house
    tmp = house.with_name(key + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "--quiet"]
    _say("building streamflow's wheel from the checkout ...")
    _run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(tmp), str(source)], what="streamflow wheel"
    )
    local = str(next(tmp.glob("streamflow-*.whl")))
    # the checkout's wheel stands in for "streamflow": pip resolves its extras from it
    reqs = [
        local + r.removeprefix("streamflow") if r.startswith("streamflow[") else r
        for r in requirements
    ]
    if sys.version_info[:2] == TARGET_PYTHON and sys.platform == "linux":
        fetch = [*pip, "wheel", "--wheel-dir", str(tmp), "--find-links", str(tmp)]
    else:  # another host: binary wheels for the image's Python and platform
        version = ".".join(map(str, TARGET_PYTHON))
        fetch = [
            *pip,
            "download",
            "--dest",
            str(tmp),
            "--only-binary=:all:",
            "--python-version",
            version,
            "--platform",
            "manylinux2014_x86_64",
        ]
    _say(f"fetching wheels for {', '.join(requirements)} (pip's cache keeps them) ...")
    _run([*fetch, *reqs], what="wheels")
    (tmp / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(house, ignore_errors=True)
    tmp.rename(house)
    return house


# -- the build -----------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Everything a build needs, worked out before anything runs (what --dry-run shows)."""

    app: Application
    root: Path
    source: Path
    files: list[str]
    extras: dict[str, str]
    requirements: list[str]
    base_image: str
    streamflow_image: str
    app_image: str
    wheels_key: str


def _requirements(root: Path, extras: dict[str, str]) -> list[str]:
    wanted = ",".join(["k8s", *extras])
    own = root / "requirements.txt"
    lines = own.read_text(encoding="utf-8").splitlines() if own.is_file() else []
    return [
        f"streamflow[{wanted}]",
        *(x.strip() for x in lines if x.strip() and not x.startswith("#")),
    ]


def make_plan(
    blueprint: Path,
    *,
    root: Path | None,
    tag: str | None,
    base_image: str | None,
    builder: Builder,
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
    source = streamflow_source()
    if source is None:
        output.fail(
            "building images needs streamflow's source checkout (its operator/Dockerfile*)",
            hint="install streamflow from a checkout (pip install -e .) and run build there",
        )
    if not (source / "streamflow/operator/web/static/index.html").is_file():
        _say(
            "warning: the web view's page is not built (./dev setup builds it); the image has no UI"
        )
    found = (
        {name: "asked for with --extras" for name in extras}
        if extras is not None
        else needed_extras(app)
    )
    requirements = _requirements(project, found)
    files = project_files(project, read_ignore(project))
    if not files:
        output.fail(f"{project}'s .dockerignore leaves nothing to copy to {APP_ROOT}")
    if base_image is None:
        base_image = LOCAL_BASE if _has_image(builder, LOCAL_BASE) else PUBLIC_BASE
    # the wheel takes the whole package (the built web page too), whatever .dockerignore says
    package = project_files(source / "streamflow", ["**/__pycache__", "**/*.pyc"])
    src_files = [f"streamflow/{f}" for f in package]
    src_files += ["pyproject.toml", "README.md"]
    dockerfile = (source / "operator/Dockerfile").read_text()
    sf_hash = _digest(
        source, sorted(src_files), dockerfile, base_image, _image_id(builder, base_image)
    )
    version = streamflow.__version__
    streamflow_image = f"localhost/streamflow:{version}-{sf_hash[:12]}"
    app_dockerfile = (source / "operator/Dockerfile.streamlets").read_text()
    app_hash = _digest(project, files, app_dockerfile, streamflow_image, *requirements)
    app_image = tag or f"localhost/streamflow/{app.name}:{app_hash[:12]}"
    wheels_key = hashlib.sha256("\n".join([sf_hash, *requirements]).encode()).hexdigest()[:16]
    return Plan(
        app,
        project,
        source,
        files,
        found,
        requirements,
        base_image,
        streamflow_image,
        app_image,
        wheels_key,
    )


def _image_id(builder: Builder, image: str) -> str:
    form = "{{.FromImageID}}" if builder.name == "buildah" else "{{.Id}}"
    command = [*builder.exists(image)[:-1], "--format", form, image]  # flags before the name
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def _commands(plan: Plan, builder: Builder, contexts: Path) -> list[tuple[str, list[str]]]:
    sf = builder.build(
        dockerfile=plan.source / "operator/Dockerfile",
        context=contexts / "streamflow",
        tags=[plan.streamflow_image, f"localhost/streamflow:{streamflow.__version__}"],
        args={"BASE_IMAGE": plan.base_image},
    )
    app = builder.build(
        dockerfile=plan.source / "operator/Dockerfile.streamlets",
        context=contexts / "app",
        tags=[plan.app_image],
        args={"STREAMFLOW_IMAGE": plan.streamflow_image},
    )
    return [("streamflow image", sf), ("application image", app)]


def run_build(
    plan: Plan, builder: Builder, *, archive: tuple[str, Path] | None, rebuild: bool
) -> None:
    """Build what is missing (or everything, with ``rebuild``), then write the archive if asked."""
    contexts = images_dir() / "contexts" / plan.app.name
    wanted = [(what, cmd) for what, cmd in _commands(plan, builder, contexts)]
    todo = [(plan.streamflow_image, wanted[0]), (plan.app_image, wanted[1])]
    todo = [(image, step) for image, step in todo if rebuild or not _has_image(builder, image)]
    if todo:
        house = _wheelhouse(plan.source, plan.requirements, plan.wheels_key)
        shutil.rmtree(contexts, ignore_errors=True)
        wheels = sorted(p.name for p in house.glob("*.whl"))
        for name in ("streamflow", "app"):
            _link_tree(house, wheels, contexts / name / "wheels")
        (contexts / "app" / "requirements.txt").write_text("\n".join(plan.requirements) + "\n")
        _link_tree(plan.root, plan.files, contexts / "app" / "app")
    for image, (what, command) in todo:
        _say(f"building the {what} {image} with {builder.name} ...")
        _run(command, what=what)
    if not todo:
        _say(f"{plan.app_image} is up to date")
    elif builder.name == "buildah":
        _prune(builder, keep=[plan.streamflow_image, plan.app_image])
    shutil.rmtree(contexts, ignore_errors=True)
    if archive:
        _write_archive(builder, plan.app_image, *archive)


def _prune(builder: Builder, *, keep: list[str]) -> None:
    """Drop the superseded content tags of these images: vfs stores every image whole."""
    listed = subprocess.run(
        [*builder._base(), "images", "--format", "{{.Name}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    repos = {image.rpartition(":")[0] for image in keep}
    old = [i for i in listed.stdout.split() if i.rpartition(":")[0] in repos and i not in keep]
    old = [i for i in old if not i.endswith(f":{streamflow.__version__}")]
    if old:
        _say(f"removing {len(old)} superseded image(s): {', '.join(old)}")
        subprocess.run([*builder._base(), "rmi", *old], capture_output=True, check=False)
    archives = images_dir() / "archives"
    for stale in archives.glob("*.tar") if archives.is_dir() else ():
        stale.unlink()


def _write_archive(builder: Builder, image: str, kind: str, path: Path) -> None:
    """Write ``image`` to ``path``; kept per image id, so an unchanged image is a copy."""
    cached = images_dir() / "archives" / f"{_image_id(builder, image) or 'unknown'}.{kind}.tar"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.with_suffix(".tmp").unlink(missing_ok=True)
        _say(f"writing the {kind} of {image} (a minute or two for TensorFlow) ...")
        _run(builder.save(image, kind, cached.with_suffix(".tmp")), what=kind, quiet=True)
        cached.with_suffix(".tmp").rename(cached)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    try:
        os.link(cached, path)
    except OSError:
        shutil.copyfile(cached, path)
    _say(f"wrote {path}: import it with ctr -n k8s.io images import {path}")


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


def build(
    blueprint: Annotated[
        Path,
        typer.Argument(help="The application's blueprint (YAML).", exists=True, dir_okay=False),
    ],
    tag: Annotated[
        str | None,
        typer.Option(
            help="The image's reference (default: localhost/streamflow/APP:CONTENT-HASH)."
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
            help=f"The streamflow image's base (default: {LOCAL_BASE}, else {PUBLIC_BASE})."
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
    rebuild: Annotated[
        bool, typer.Option(help="Build even if an image with the same content tag exists.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Print the plan and the commands; build nothing.")
    ] = False,
) -> None:
    """Build the application's container image (streamflow, its extras and the project under /app).

    Prints the image reference to deploy on stdout; progress goes to stderr.
    """
    archive = _parse_output(output_)
    if builder_name is not None and builder_name not in BUILDERS:
        output.fail(
            f"--builder {builder_name!r}: expected one of {', '.join(BUILDERS)}",
            exit_code=output.EXIT_USAGE,
        )
    builder = find_builder(builder_name, storage=images_dir())
    chosen = None if extras is None else [e.strip() for e in extras.split(",") if e.strip()]
    plan = make_plan(
        blueprint, root=root, tag=tag, base_image=base_image, builder=builder, extras=chosen
    )
    workdir = (Path(APP_ROOT) / blueprint.resolve().parent.relative_to(plan.root)).as_posix()
    _say(
        f"application {plan.app.name}: {len(plan.files)} files of {plan.root} go to "
        f"{APP_ROOT}; pods run in {workdir}"
    )
    for extra, reason in plan.extras.items() or [("(none)", "no streamlet needs one")]:
        _say(f"extra {extra}: {reason}")
    if dry_run:
        contexts = images_dir() / "contexts" / plan.app.name
        _say(
            f"requirements: {' '.join(plan.requirements)} (wheels made here, installed --no-index)"
        )
        for what, command in _commands(plan, builder, contexts):
            print(f"# {what}\n{' '.join(command)}")
        if archive:
            print(f"# archive\n{' '.join(builder.save(plan.app_image, *archive))}")
        return
    run_build(plan, builder, archive=archive, rebuild=rebuild)
    print(plan.app_image)


def register(app: typer.Typer) -> None:
    app.command("build")(build)
