"""``streamflow init NAME``: a small project that verifies, runs and tests as it is.

After Cargo's ``cargo new`` and Cloudflow's examples: the quickest way to learn
a framework's shape is a working project of one's own to change. It is the
smallest that shows every part a real application has: ``pyproject.toml``, an
input and an output Avro schema, a module with an ingress, a processor and an
egress, a blueprint that wires them with two topics, and testkit unit tests.
``streamflow verify``, ``streamflow run`` and ``pytest`` work in the folder
with nothing added (the blueprint is ``blueprint.yaml``, which verify and run
read by default), and ``streamflow build blueprint.yaml`` makes its image.

The files are templates beside this module (``init_template/``), filled in by
plain token replacement: the project's name, its Python module, its Avro
namespace and the application's (DNS-label) name are all derived from NAME.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

import streamflow
from streamflow.cli import output

__all__ = ["Names", "init", "names_for", "register", "render"]

TEMPLATES = Path(__file__).with_name("init_template")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Names:
    """What NAME becomes in each place that has its own rules."""

    name: str  # the folder and the distribution: demo-app
    module: str  # the streamlets' Python module: demo_app
    namespace: str  # the schemas' Avro namespace: demo_app
    app: str  # the application (a DNS label, as Kubernetes needs): demo-app


def names_for(name: str) -> Names:
    """The names derived from ``name``; ValueError says why one cannot be made."""
    if not _NAME.match(name):
        raise ValueError(
            "a project name starts with a letter and has only letters, digits, '-' and '_'"
        )
    base = name.lower().replace("-", "_")
    module = f"{base}_app"
    if keyword.iskeyword(base) or len(base) > 50:
        raise ValueError(f"{name!r} cannot name a Python module; choose another name")
    return Names(name=name, module=module, namespace=base, app=base.replace("_", "-"))


def render(names: Names) -> dict[str, str]:
    """Each file of the project (its path inside the project) and its text."""
    tokens = {
        "name": names.name,
        "module": names.module,
        "namespace": names.namespace,
        "app": names.app,
        "streamflow_version": streamflow.__version__,
    }
    layout = {
        "pyproject.toml": "pyproject.toml.tmpl",
        "README.md": "README.md.tmpl",
        ".gitignore": "gitignore.tmpl",
        ".dockerignore": "dockerignore.tmpl",
        "blueprint.yaml": "blueprint.yaml.tmpl",
        f"{names.module}.py": "app.py.tmpl",
        f"schemas/{names.namespace}/Reading.avsc": "Reading.avsc.tmpl",
        f"schemas/{names.namespace}/Score.avsc": "Score.avsc.tmpl",
        f"tests/test_{names.module}.py": "test_app.py.tmpl",
    }
    files = {}
    for target, template in layout.items():
        text = (TEMPLATES / template).read_text(encoding="utf-8")
        for token, value in tokens.items():
            text = text.replace("{{" + token + "}}", value)
        files[target] = text
    return files


def init(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", help="The project: a new folder of this name is made."),
    ],
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", file_okay=False, help="Where to make it (default: ./NAME); empty or new."
        ),
    ] = None,
) -> None:
    """Make a small working project: schemas, streamlets, a blueprint and their tests."""
    try:
        names = names_for(name)
    except ValueError as exc:
        output.fail(f"{name!r}: {exc}", hint="for example: streamflow init sensors",
                    exit_code=output.EXIT_USAGE)  # fmt: skip
    folder = directory or Path(name)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        output.fail(
            f"{folder} already exists and is not an empty folder",
            hint="choose another NAME, or --dir an empty or new folder",
            exit_code=output.EXIT_USAGE,
        )
    for relative, text in render(names).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    out = output.error_console()
    out.print(f"made {names.name} in {folder}; next:", markup=False, highlight=False)
    for step in (
        f"cd {folder}",
        "streamflow verify",
        "streamflow run --for 30s",
        "pytest",
    ):
        out.print(f"  {step}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(init)
