"""What goes into an image: the project's files, the streamlets' extras, the content hashes.

Pure functions of the files on disk and the verified application, so the
planner (``plans``) can be tested without a builder. The ignore rules are
Docker's ``.dockerignore`` rules, applied here rather than by the builder,
because the application image's context is written by streamflow (hard links
of the kept files) and because the kept files are what the content tag hashes.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from streamflow.api import descriptor as descriptors
from streamflow.blueprint.model import Application

__all__ = [
    "DEFAULT_IGNORE",
    "digest",
    "ignored",
    "needed_extras",
    "project_files",
    "read_ignore",
    "requirements",
    "select",
]


#: What an image never needs, when the project has no ``.dockerignore`` of its own:
#: version control (``.git/config`` may hold a token), environment files (``.env``
#: holds secrets by convention), virtualenvs and caches.
DEFAULT_IGNORE = [
    ".git",
    ".hg",
    ".svn",
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    ".venv",
    "venv",
    "**/node_modules",
    "**/__pycache__",
    "**/*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".idea",
    ".vscode",
]


def read_ignore(root: Path) -> list[str]:
    """The patterns of ``root/.dockerignore``, comments dropped; :data:`DEFAULT_IGNORE`
    when there is none."""
    file = root / ".dockerignore"
    if not file.is_file():
        return list(DEFAULT_IGNORE)
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
    """Every file under ``root`` that the patterns keep, sorted (see :func:`select`)."""
    return select(root, patterns)[0]


def select(root: Path, patterns: list[str]) -> tuple[list[str], list[str]]:
    """The files under ``root`` that the patterns keep, and the kept names left out
    because they are links to something outside ``root``; both sorted.

    A link to a file inside the project counts as that file. One that leads out
    of it (``secrets -> ~/.ssh/id_rsa``, ``data -> /etc``) is never followed: the
    image would otherwise carry whatever it points at.
    """
    found: list[str] = []
    outside: list[str] = []
    real_root = root.resolve()
    for directory, dirs, files in os.walk(root):
        base = Path(directory).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        # a pruned directory is never walked (.venv alone is gigabytes), unless a ! may reopen it
        reopen = any(p.startswith("!") for p in patterns)
        dirs[:] = sorted(d for d in dirs if reopen or not ignored(prefix + d, patterns))
        outside += [prefix + d for d in dirs if _leaves(root / prefix / d, real_root)]
        for name in files:
            rel = prefix + name
            if ignored(rel, patterns):
                continue
            if _leaves(root / rel, real_root):
                outside.append(rel)
            elif (root / rel).is_file():
                found.append(rel)
    return sorted(found), sorted(outside)


def _leaves(path: Path, real_root: Path) -> bool:
    """Whether ``path`` is a link whose target is outside ``real_root``."""
    if not path.is_symlink():
        return False
    return not path.resolve().is_relative_to(real_root)


def needed_extras(app: Application) -> dict[str, str]:
    """The streamflow extras the application's streamlets need, each with the reason why.

    Serving needs the runtime of the models it is given: the blueprint's own
    ModelPublisher says which (keras, saved_model: tf; onnx: onnx); without
    one, tf, the embedded kind a model push sends by default.
    """
    from streamflow.streamlets.serving import ModelPublisher
    from streamflow.streamlets.serving.follower import ModelFollower

    extras: dict[str, str] = {}
    followers: list[str] = []
    for name, spec in app.streamlets.items():
        cls = descriptors.load_streamlet_class(spec.class_path, python_paths=app.python_paths)
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


def requirements(root: Path, extras: dict[str, str]) -> list[str]:
    """streamflow with ``k8s`` and ``extras``, then the lines of the project's requirements.txt."""
    wanted = ",".join(["k8s", *extras])
    own = root / "requirements.txt"
    lines = own.read_text(encoding="utf-8").splitlines() if own.is_file() else []
    return [
        f"streamflow[{wanted}]",
        *(x.strip() for x in lines if x.strip() and not x.startswith("#")),
    ]


def digest(root: Path, files: list[str], *extra: str) -> str:
    """A sha256 over ``extra`` and each file's path and content (the content tags' source)."""
    h = hashlib.sha256()
    for text in extra:
        h.update(text.encode() + b"\0")
    for rel in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()
