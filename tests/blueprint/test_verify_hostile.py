"""Blueprints written to hurt: credentials in ``kafka.config``, YAML alias bombs, trust in verify.

Issue 10, findings 15, 18 and 19: ``verify`` must refuse a secret in a
blueprint (it would land in the resource's spec and the ConfigMap) and say
where credentials go; a few hundred bytes of aliases must not expand into
hundreds of millions of nodes; and ``verify --help`` must say that it imports
(so runs) the streamlet modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from streamflow.blueprint import yamlload
from streamflow.cli.main import app
from tests.blueprint.bp_helpers import only, verify, where

WINE = Path(__file__).parents[2] / "blueprints" / "wine"

# The classic "billion laughs": nine levels of nine aliases, 9**9 strings once expanded.
ALIAS_BOMB = textwrap.dedent(
    """\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """
)


def invoke(*args: object) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def wine_with(tmp_path: Path, extra: str) -> Path:
    """The wine example, copied next to its streamlets, with ``extra`` YAML appended."""
    text = (WINE / "blueprint.yaml").read_text() + textwrap.dedent(extra)
    path = WINE / f".hostile-{tmp_path.name}.yaml"
    path.write_text(text)
    return path


# -- finding 15: no credentials in a blueprint -----------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "ssl.keystore.key",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "basic.auth.user.info",
        "SASL.PASSWORD",
    ],
)
def test_a_secret_in_kafka_config_is_a_located_problem(key: str) -> None:
    result = verify(
        f"""
        name: creds
        kafka:
          bootstrap: kafka:9092
          config:
            security.protocol: SASL_SSL
            {key}: hunter2
        streamlets:
          source: {{class: bp_fixture_streamlets:Source}}
        topics:
          t: {{producers: [source.out], partitions: 1}}
        """
    )
    problem = only(result, "secret-in-config")
    assert where(problem) == (6, 5)
    assert key in problem.message
    assert "hunter2" not in problem.message + problem.hint
    assert "STREAMFLOW_KAFKA_" in problem.hint and "kafka.secret" in problem.hint
    assert not result.valid


def test_verify_refuses_a_blueprint_with_a_password_and_says_where(tmp_path: Path) -> None:
    path = wine_with(
        tmp_path,
        """
        kafka:
          config:
            sasl.username: wine
            sasl.password: hunter2
        """,
    )
    try:
        result = invoke("verify", path)
        line = 1 + path.read_text().splitlines().index("    sasl.password: hunter2")
    finally:
        path.unlink()
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if "secret-in-config" in line]
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith(f"{path}:{line}:5: error[secret-in-config]: ")
    assert "STREAMFLOW_KAFKA_SASL_PASSWORD" in result.stdout
    assert "hunter2" not in result.stdout


def test_non_secret_security_settings_stay_allowed() -> None:
    result = verify(
        """
        name: tls
        kafka:
          config:
            security.protocol: SASL_SSL
            sasl.mechanism: SCRAM-SHA-512
            sasl.username: wine
            ssl.ca.location: /etc/kafka/ca.pem
        streamlets:
          source: {class: bp_fixture_streamlets:Source}
        topics:
          t: {producers: [source.out], partitions: 1}
        """
    )
    assert [p for p in result.problems if p.code == "secret-in-config"] == []


# -- finding 18: alias bombs ------------------------------------------------------------


def test_the_billion_laughs_is_refused_after_a_bounded_number_of_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(ALIAS_BOMB.encode()) < 420
    made = 0
    real_init = yamlload.Node.__init__

    def counting(self: yamlload.Node, *args: object, **kwargs: object) -> None:
        nonlocal made
        made += 1
        assert made <= 2 * yamlload.MAX_ALIAS_NODES, "alias expansion is not capped"
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(yamlload.Node, "__init__", counting)
    root, problems = yamlload.parse_yaml(ALIAS_BOMB, filename="bomb.yaml")
    assert root is None
    (problem,) = problems
    assert problem.code == "invalid-yaml"
    assert "alias" in problem.message
    assert problem.position.line > 1


def test_verify_reports_an_alias_bomb_as_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("name: bomb\n" + ALIAS_BOMB)
    result = invoke("verify", path)
    assert result.exit_code == 1
    assert f"{path}:" in result.stdout and "error[invalid-yaml]" in result.stdout


def test_ordinary_aliases_still_work() -> None:
    result = verify(
        """
        name: anchors
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
            config: &cfg {rate: 2.0}
          other:
            class: bp_fixture_streamlets:Source
            config: *cfg
        topics:
          t: {producers: [source.out, other.out], partitions: 1}
        """
    )
    assert result.valid, result.problems


# -- finding 19: verify runs the streamlets' module code -----------------------------------


def test_verify_help_says_it_imports_the_streamlet_modules() -> None:
    result = invoke("verify", "--help")
    text = " ".join(result.stdout.split())
    assert "imports" in text and "top-level code" in text
    assert "trust" in text


def test_readme_verify_section_says_it_imports_the_streamlet_modules() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "verify only blueprints you trust" in " ".join(readme.split()).lower()


# -- YAML nested past the recursion limit -------------------------------------------------


def _run_verify(path: Path) -> subprocess.CompletedProcess[str]:
    """``streamflow verify`` in its own process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "verify", str(path)],
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_verify_reports_yaml_nested_100000_deep_at_its_position(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\nstreamlets: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = _run_verify(path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert "RecursionError" not in result.stdout + result.stderr
    # the top mapping is the first level: the bracket that opens one level too many
    column = len("streamlets: ") + yamlload.MAX_DEPTH
    assert (
        f"{path}:2:{column}: error[invalid-yaml]: the YAML nests deeper than "
        f"{yamlload.MAX_DEPTH} levels" in result.stdout
    ), result.stdout[-2000:]


def test_block_nesting_is_bounded_too() -> None:
    root, problems = yamlload.parse_yaml("- " * 50_000 + "x\n", filename="b.yaml")
    assert root is None
    (problem,) = problems
    assert problem.code == "invalid-yaml" and "nests deeper than" in problem.message
    assert (problem.position.line, problem.position.column) == (1, 1 + 2 * yamlload.MAX_DEPTH)


def test_nesting_made_of_aliases_is_bounded_too() -> None:
    lines = ["a0: &a0 [x]"] + [f"a{k}: &a{k} [*a{k - 1}]" for k in range(1, 80)]
    root, problems = yamlload.parse_yaml("\n".join(lines) + "\n", filename="a.yaml")
    assert root is None
    (problem,) = problems
    assert problem.code == "invalid-yaml" and "nests deeper than" in problem.message
    assert problem.position.line > 1


def test_nesting_within_the_bound_is_read() -> None:
    depth = yamlload.MAX_DEPTH
    root, problems = yamlload.parse_yaml("[" * depth + "]" * depth + "\n", filename="ok.yaml")
    assert problems == [] and root is not None
