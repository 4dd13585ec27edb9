"""Output shared by the CLI's commands: rich text for people, JSON or YAML for scripts.

Every command prints through these helpers so that problems look the same
everywhere (``file:line:col: error[code]: message`` with an indented hint),
colour appears only on a terminal, machine formats never carry markup or line
wrapping, and a user's mistake ends in a message and an exit code, never in a
traceback. Exit codes are a contract: 0 success, 1 invalid input, 2 usage.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from ruamel.yaml import YAML

from streamflow.blueprint import Problem, Severity

__all__ = [
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_USAGE",
    "console",
    "error_console",
    "fail",
    "plain_cells",
    "plural",
    "print_data",
    "print_problems",
    "problem_counts",
    "problem_text",
]

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow"}


def console() -> Console:
    """A console on stdout. Made per call, so it writes wherever stdout is now (tests swap it)."""
    return Console(highlight=False, soft_wrap=True)


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def problem_text(problem: Problem) -> Text:
    """One problem as styled text; messages are never parsed as rich markup."""
    text = Text.assemble(
        (str(problem.position), "bold"),
        ": ",
        (f"{problem.severity.value}[{problem.code}]", _SEVERITY_STYLE[problem.severity]),
        ": ",
        problem.message,
    )
    if problem.hint:
        text.append("\n  ")
        text.append("hint", style="cyan")
        text.append(f": {problem.hint}")
    return text


def plain_cells(*values: object) -> list[Text]:
    """Table cells shown as written: text from users or classes is never rich markup."""
    return [Text(str(value)) for value in values]


def print_problems(problems: Sequence[Problem], *, to: Console) -> None:
    for problem in problems:
        to.print(problem_text(problem))


def problem_counts(problems: Sequence[Problem]) -> str:
    """``2 errors, 1 warning``; ``0 problems`` when there are none."""
    errors = sum(p.severity is Severity.ERROR for p in problems)
    warnings = len(problems) - errors
    parts = [plural(n, noun) for n, noun in ((errors, "error"), (warnings, "warning")) if n]
    return ", ".join(parts) or "0 problems"


def print_data(data: Any, *, fmt: str) -> None:
    """Write ``data`` as JSON or YAML on stdout, plainly (no colour, no wrapping)."""
    data = json.loads(json.dumps(data, default=_plain))  # datetimes, bytes: as JSON shows them
    if fmt == "yaml":
        buffer = io.StringIO()
        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        # Keep the order the data was built in (ruamel annotates this attribute as None).
        yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
        yaml.dump(data, buffer)
        sys.stdout.write(buffer.getvalue())
    else:
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def fail(
    message: str, *, code: str = "", hint: str = "", exit_code: int = EXIT_INVALID
) -> NoReturn:
    """Report a user error on stderr and exit; ``code`` is a problem code (class-not-found)."""
    label = f"error[{code}]" if code else "error"
    text = Text.assemble((label, "bold red"), ": ", message)
    if hint:
        text.append("\n  ")
        text.append("hint", style="cyan")
        text.append(f": {hint}")
    error_console().print(text)
    raise typer.Exit(exit_code)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
