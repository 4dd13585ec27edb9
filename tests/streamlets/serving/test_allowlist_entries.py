"""``streamflow verify`` warns of an allowlist entry that names no port or no path boundary.

An entry such as ``http://127.0.0.1:`` admits every port of the host: a
descriptor may then send a replica to Redis on 6379 or to an admin API. One
such as ``https://models.example.com`` says nothing of where its path ends,
and read as a string prefix (as people and other tools read it) it also names
``https://models.example.com.evil.net/``. Both verify, with a warning at the
entry; an exact origin with a trailing ``/`` verifies clean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streamflow.cli.main import app
from streamflow.models import locations
from streamflow.streamlets.drift import DriftDetector
from streamflow.streamlets.explain import ModelExplainer
from tests.streamlets.serving.tensor_apps import MixedServing

HERE = Path(__file__).parent

LOOSE = [
    "http://127.0.0.1:",  # every port
    "http://localhost:*",  # every port
    "http://127.0.0.1:*/models/",  # every port, even with a path
    "https://models.example.com",  # no path boundary
    "http://127.0.0.1:8501",  # a port, but no path boundary
    "https://models.example.com/models",  # a path, but not ended
    "file:///srv/models",  # no path boundary
]
EXACT = [
    "http://127.0.0.1:8501/",
    "https://models.example.com/models/",
    "https://models.example.com/",
    "http://[::1]:8080/",
    "file:///srv/models/",
]


@pytest.mark.parametrize("entry", LOOSE)
def test_an_entry_without_a_port_or_a_path_boundary_is_loose(entry: str) -> None:
    assert locations.loose(entry)


@pytest.mark.parametrize("entry", EXACT)
def test_an_exact_origin_ending_at_a_path_boundary_is_not(entry: str) -> None:
    assert locations.loose(entry) == ()


def test_each_reason_is_named() -> None:
    assert locations.loose("http://127.0.0.1:") == (
        "admits every port of 127.0.0.1",
        "does not end at a path boundary ('/')",
    )
    assert locations.loose("https://models.example.com") == (
        "does not end at a path boundary ('/')",
    )
    assert locations.loose("http://localhost:*/m/") == ("admits every port of localhost",)


def test_the_finding_an_any_port_entry_admits_every_local_service() -> None:
    """Why the examples name their port: ``host:`` really admits any service there."""
    assert locations.allowed("http://127.0.0.1:6379/", ["http://127.0.0.1:"])
    assert not locations.allowed("http://127.0.0.1:6379/", ["http://127.0.0.1:8080/"])
    assert locations.allowed("http://127.0.0.1:8080", ["http://127.0.0.1:8080/"])
    # streamflow compares parts, so the host is exact even without a boundary
    assert not locations.allowed("https://models.example.com.evil.net/m", LOOSE)


# -- as `streamflow verify` says it ---------------------------------------------------------

BLUEPRINT = """\
name: allowlists
python_paths: [{here}]
schemas: [{here}/schemas]
streamlets:
  model:
    class: tensor_apps:MixedServing
    config:
      inputs:
        features: {{field: features, dtype: float32, shape: [4]}}
        region: {{field: region, dtype: int64}}
      outputs:
        probabilities: {{field: predicted, transform: argmax, labels: [a, b, c]}}
      allowlist:
        - "http://127.0.0.1:8501/"
        - "http://127.0.0.1:"
        - "https://models.example.com/models/"
        - "https://models.example.com"
topics:
  data: {{producers: [], consumers: [model.in]}}
  out: {{producers: [model.out]}}
  statuses: {{producers: [model.status]}}
  models: {{producers: [], consumers: [model.model], config: {{cleanup.policy: compact}}}}
"""


def _verify(tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    path = tmp_path / "blueprint.yaml"
    path.write_text(BLUEPRINT.format(here=HERE))
    result = CliRunner().invoke(app, ["verify", str(path), "-o", "json", *args])
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)["problems"]


def test_verify_warns_at_each_loose_entry_and_still_passes(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path)
    assert code == 0, problems
    assert [p["severity"] for p in problems] == ["warning", "warning"], problems
    assert {p["code"] for p in problems} == {"loose-allowlist-entry"}
    any_port, no_boundary = problems
    assert (any_port["line"], any_port["column"]) == (15, 11)  # - http://127.0.0.1:
    assert "'http://127.0.0.1:'" in any_port["message"]
    assert "every port of 127.0.0.1" in any_port["message"]
    assert "http://127.0.0.1:PORT/" in any_port["hint"]
    assert (no_boundary["line"], no_boundary["column"]) == (17, 11)
    assert "'https://models.example.com'" in no_boundary["message"]
    assert "path boundary" in no_boundary["message"]
    assert "https://models.example.com/" in no_boundary["hint"]


def test_verify_warns_of_a_loose_entry_given_with_set(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path, "--set", "model.allowlist=http://127.0.0.1:,http://h:1/")
    assert code == 0, problems
    (problem,) = problems
    assert (problem["code"], problem["severity"], problem["file"]) == (
        "loose-allowlist-entry",
        "warning",
        "<--set>",
    )
    assert "'http://127.0.0.1:'" in problem["message"]


def test_verify_prints_the_warning_for_people(tmp_path: Path) -> None:
    path = tmp_path / "blueprint.yaml"
    path.write_text(BLUEPRINT.format(here=HERE))
    result = CliRunner().invoke(app, ["verify", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning[loose-allowlist-entry]" in result.output
    assert "2 warnings" in result.output


@pytest.mark.parametrize("cls", [MixedServing, ModelExplainer, DriftDetector])
def test_every_streamlet_with_an_allowlist_warns(cls: type[Any]) -> None:
    """Serving, explaining and drift streamlets, whether or not the rest of the config fits."""
    found = cls.check_config({"allowlist": ["http://h:1/", "http://h:"]}, schemas={})
    warnings = [p for p in found if p.code == "loose-allowlist-entry"]
    assert [(p.param, p.path, p.severity) for p in warnings] == [("allowlist", (1,), "warning")]
