"""The four target options, declared once (`streamflow.cli.targeting`).

A command takes ``where: TargetChoice``; `with_target` gives it ``--target``,
``--kubeconfig``, ``--context`` and ``--namespace`` in that place, and hands it
the choice the user made.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from streamflow.cli import targeting
from streamflow.cli.targeting import LOCAL, TargetChoice, TargetKind, with_target

seen: list[tuple[str, TargetChoice, bool]] = []


@with_target
def command(
    name: Annotated[str, typer.Argument()],
    where: TargetChoice = LOCAL,
    follow: Annotated[bool, typer.Option("--follow")] = False,
) -> None:
    seen.append((name, where, follow))


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    return app


def test_the_four_options_stand_where_the_choice_stood() -> None:
    names = list(inspect.signature(command).parameters)
    assert names == ["name", "target", "kubeconfig", "context", "namespace", "follow"]


def test_the_command_gets_the_choice_the_user_made() -> None:
    seen.clear()
    result = CliRunner().invoke(
        _app(),
        ["app1", "-t", "kubernetes", "--kubeconfig", "k.yaml", "--context", "c", "-n", "ns",
         "--follow"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen == [("app1", TargetChoice(TargetKind.kubernetes, "k.yaml", "c", "ns"), True)]


def test_without_options_the_choice_is_local() -> None:
    seen.clear()
    result = CliRunner().invoke(_app(), ["app1"])
    assert result.exit_code == 0, result.output
    assert seen == [("app1", LOCAL, False)] and LOCAL.local


def test_an_unknown_target_is_a_usage_error() -> None:
    result = CliRunner().invoke(_app(), ["app1", "--target", "nomad"])
    assert result.exit_code == 2
    assert "local" in result.output and "kubernetes" in result.output


def test_the_help_lists_the_options_in_the_commands_order() -> None:
    result = CliRunner().invoke(_app(), ["--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    order = [result.output.index(flag) for flag in
             ("--target", "--kubeconfig", "--context", "--namespace", "--follow")]  # fmt: skip
    assert order == sorted(order), result.output


def test_a_command_without_a_choice_cannot_be_decorated() -> None:
    def plain(name: str) -> None: ...

    with pytest.raises(TypeError, match="where: TargetChoice"):
        with_target(plain)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []

    def get_target(kind: str, **options: Any) -> str:
        calls.append((kind, options))
        return f"a {kind} target"

    monkeypatch.setattr(targeting.backends, "get_target", get_target)
    return calls


def test_kubernetes_opens_with_its_options_and_the_image(
    opened: list[tuple[str, dict[str, Any]]],
) -> None:
    choice = TargetChoice(TargetKind.kubernetes, "k.yaml", "c", "ns")
    assert choice.open(image="img:1") == "a kubernetes target"
    assert opened == [
        (
            "kubernetes",
            {"kubeconfig": "k.yaml", "context": "c", "namespace": "ns", "image": "img:1"},
        )
    ]


def test_local_names_the_kubernetes_options_it_ignores(
    opened: list[tuple[str, dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    warned: list[list[str]] = []
    monkeypatch.setattr(targeting.views, "print_warnings", warned.append)
    monkeypatch.setenv("STREAMFLOW_HOME", str(tmp_path))
    assert TargetChoice(namespace="ns", context="c").open(image="img") == "a local target"
    assert warned == [["--context, --namespace, --image: only for --target kubernetes; ignored"]]
    assert [kind for kind, _ in opened] == ["local"]
