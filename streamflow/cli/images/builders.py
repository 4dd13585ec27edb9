"""The image builders (buildah, podman, docker): their command lines, and running them.

Each builder's command lines are built by one small value (:class:`Builder`),
so the planner and ``--dry-run`` show exactly what would run, and the tests
check them without a builder installed. buildah is pinned to streamflow's own
storage (chroot isolation): it then works without a daemon, as root or not,
next to the base image that ``tools/images/build`` makes. Its storage driver is
overlay where the kernel mounts overlayfs for us (root, on a filesystem that
can be an upper layer), which commits a layer without copying the whole root
filesystem, and vfs elsewhere (``STREAMFLOW_BUILDAH_DRIVER`` chooses): building
the wine example's two images took 154 s instead of 287 s on 2 cores. Each
driver has its own storage folder; the base image, which ``tools/images/build``
puts in the vfs one, is copied into the overlay one when it is first needed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from streamflow.cli import output

__all__ = [
    "BUILDERS",
    "Builder",
    "find_builder",
    "has_image",
    "image_id",
    "images_dir",
    "prune",
    "push",
    "run",
    "say",
    "write_archive",
]

BUILDERS = ("buildah", "podman", "docker")
DRIVERS = ("overlay", "vfs")
DRIVER_ENV = "STREAMFLOW_BUILDAH_DRIVER"


def images_dir() -> Path:
    """Where contexts, wheelhouses and buildah's storage live (never the project)."""
    explicit = os.environ.get("STREAMFLOW_IMAGES_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "streamflow" / "images"


def say(message: str) -> None:
    """A progress line on stderr: stdout carries only the image reference."""
    print(f"build: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Builder:
    """One image builder's command lines; buildah's are pinned to streamflow's own storage."""

    name: str
    exe: str
    storage: Path | None = None
    driver: str = "vfs"  # buildah's storage driver

    def base(self) -> list[str]:
        """The executable and its global flags (buildah's storage)."""
        if self.name == "buildah" and self.storage is not None:
            return [self.exe, *storage_flags(self.storage, self.driver)]
        return [self.exe]

    def build(
        self, *, dockerfile: Path, context: Path, tags: list[str], args: dict[str, str]
    ) -> list[str]:
        verb = ["bud", "--isolation", "chroot"] if self.name == "buildah" else ["build"]
        command = [*self.base(), *verb, "-f", str(dockerfile)]
        for key, value in args.items():
            command += ["--build-arg", f"{key}={value}"]
        for tag in tags:
            command += ["-t", tag]
        return [*command, str(context)]

    def exists(self, image: str) -> list[str]:
        if self.name == "buildah":
            return [*self.base(), "inspect", "--type", "image", image]
        return [*self.base(), "image", "inspect", image]

    def tag(self, image: str, reference: str) -> list[str]:
        return [*self.base(), "tag", image, reference]

    def push(self, reference: str) -> list[str]:
        if self.name == "buildah":  # buildah names the destination's transport itself
            return [*self.base(), "push", reference, f"docker://{reference}"]
        return [*self.base(), "push", reference]

    def save(self, image: str, kind: str, path: Path) -> list[str]:
        if self.name == "buildah":
            return [*self.base(), "push", image, f"{kind}:{path}:{image}"]
        if self.name == "podman":
            return [*self.base(), "save", "--format", kind, "-o", str(path), image]
        return [*self.base(), "save", "-o", str(path), image]  # docker writes docker-archive


def storage_flags(storage: Path, driver: str) -> list[str]:
    """buildah's global flags for streamflow's storage under ``storage`` with ``driver``:
    vfs keeps the folders it always had, another driver gets folders of its own."""
    suffix = "" if driver == "vfs" else f"-{driver}"
    return [
        "--root",
        str(storage / f"storage{suffix}"),
        "--runroot",
        str(storage / f"run{suffix}"),
        "--storage-driver",
        driver,
    ]


def storage_driver(storage: Path) -> str:
    """``$STREAMFLOW_BUILDAH_DRIVER``, else overlay where it mounts beside ``storage``, else vfs."""
    chosen = os.environ.get(DRIVER_ENV, "").strip()
    if chosen:
        if chosen not in DRIVERS:
            output.fail(
                f"{DRIVER_ENV}={chosen!r} is not a storage driver streamflow uses",
                hint=f"one of {', '.join(DRIVERS)}, or unset to let it choose",
            )
        return chosen
    return "overlay" if _overlay_mounts(storage) else "vfs"


@functools.cache
def _overlay_mounts(storage: Path) -> bool:
    """Whether the kernel mounts an overlayfs here, with its upper layer beside ``storage``.

    Only root mounts one without fuse-overlayfs, and an upper layer cannot be on an
    overlayfs itself (a container's root often is): a trial mount answers both.
    """
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    try:
        storage.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=storage))
    except OSError:
        return False
    try:
        for name in ("lower", "upper", "work", "merged"):
            (probe / name).mkdir()
        layers = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        mount = ["mount", "-t", "overlay", "overlay", "-o", layers, str(probe / "merged")]
        if subprocess.run(mount, capture_output=True, timeout=10, check=False).returncode != 0:
            return False
        subprocess.run(
            ["umount", str(probe / "merged")], capture_output=True, timeout=10, check=False
        )
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def find_builder(choice: str | None, *, storage: Path) -> Builder:
    """The builder to use: ``choice``, or the first of buildah, podman, docker on PATH."""
    for name in (choice,) if choice else BUILDERS:
        exe = shutil.which(name)
        if exe:
            if name != "buildah":
                return Builder(name, exe)
            return Builder(name, exe, storage, storage_driver(storage))
    wanted = choice or "an image builder"
    output.fail(
        f"{wanted} is not on PATH",
        hint="install buildah (apt-get install buildah), podman or docker; "
        "tools/images/build installs buildah and makes the base image",
    )


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a buffer, as in tests
        return 2


def run(command: list[str], *, what: str, quiet: bool = False, hint: str = "") -> None:
    """Run a builder (or pip); on failure, exit with what failed and the command line."""
    started = time.monotonic()
    if quiet:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    else:  # stdout carries only the image reference: the builder's own output goes to stderr
        result = subprocess.run(command, stdout=_stderr_fd(), text=True, check=False)
    if result.returncode != 0:
        if quiet:
            sys.stderr.write((result.stdout or "") + (result.stderr or ""))
        output.fail(
            f"{what} failed (exit {result.returncode})",
            hint=" ".join(filter(None, [hint, " ".join(command)])),
        )
    say(f"{what}: done in {time.monotonic() - started:.0f} s")


def has_image(builder: Builder, image: str) -> bool:
    return subprocess.run(builder.exists(image), capture_output=True, check=False).returncode == 0


def has_local_image(builder: Builder, image: str) -> bool:
    """Whether ``image`` is in the builder's storage, copied there first from buildah's vfs
    storage (where ``tools/images/build`` puts the base image) when only that one has it."""
    if has_image(builder, image):
        return True
    if builder.name != "buildah" or builder.storage is None or builder.driver == "vfs":
        return False
    vfs = Builder(builder.name, builder.exe, builder.storage)
    if not has_image(vfs, image):
        return False
    root, run_root = (vfs.base()[i] for i in (2, 4))
    say(f"copying {image} into the {builder.driver} storage ...")
    source = f"containers-storage:[vfs@{root}+{run_root}]{image}"
    copied = subprocess.run(
        [*builder.base(), "pull", "-q", source], capture_output=True, check=False
    )
    return copied.returncode == 0 and has_image(builder, image)


def image_id(builder: Builder, image: str) -> str:
    """The image's id, or "" when there is no such image."""
    form = "{{.FromImageID}}" if builder.name == "buildah" else "{{.Id}}"
    command = [*builder.exists(image)[:-1], "--format", form, image]  # flags before the name
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def prune(builder: Builder, *, current: list[str], keep: list[str], keep_suffix: str) -> None:
    """Drop superseded tags in the ``current`` images' repositories: vfs stores images whole.

    The ``current`` images stay, and so do ``keep`` (a ``--tag``) and any tag
    ending in ``keep_suffix`` (``:VERSION``, the stable tag); the archives are
    all stale then, and removed.
    """
    listed = subprocess.run(
        [*builder.base(), "images", "--format", "{{.Name}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    repos = {image.rpartition(":")[0] for image in current}
    spared = {*current, *keep}
    old = [i for i in listed.stdout.split() if i.rpartition(":")[0] in repos and i not in spared]
    old = [i for i in old if not i.endswith(keep_suffix)]
    if old:
        say(f"removing {len(old)} superseded image(s): {', '.join(old)}")
        subprocess.run([*builder.base(), "rmi", *old], capture_output=True, check=False)
    archives = images_dir() / "archives"
    for stale in archives.glob("*.tar") if archives.is_dir() else ():
        stale.unlink()


def push(builder: Builder, reference: str) -> None:
    """Push ``reference`` from the builder's own storage; on failure, exit with its message."""
    say(f"pushing {reference} with {builder.name} ...")
    command = builder.push(reference)
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout or "").strip().splitlines()
        output.fail(
            f"pushing {reference} failed (exit {result.returncode}): "
            f"{lines[-1] if lines else 'no message'}",
            hint="is the registry reachable, and are you logged in to it "
            f"({builder.name} login)? The command: {' '.join(command)}",
        )
    say(f"pushed {reference} in {time.monotonic() - started:.0f} s")


def write_archive(builder: Builder, image: str, kind: str, path: Path) -> None:
    """Write ``image`` to ``path``; kept per image id, so an unchanged image is a copy."""
    # the reference is part of the archive (what ctr names the image), so of the cache key too
    key = f"{image_id(builder, image) or 'unknown'}-{image.replace('/', '_').replace(':', '_')}"
    cached = images_dir() / "archives" / f"{key}.{kind}.tar"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        # this build's own file: another build of the same image may be writing one too
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        say(f"writing the {kind} of {image} (a minute or two for TensorFlow) ...")
        try:
            run(builder.save(image, kind, tmp), what=kind, quiet=True)
            tmp.replace(cached)
        finally:
            tmp.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    try:
        os.link(cached, path)
    except OSError:
        shutil.copyfile(cached, path)
    say(f"wrote {path}: import it with ctr -n k8s.io images import {path}")
