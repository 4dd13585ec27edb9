"""Dashboards and alerts: the rules pass promtool, fire when they should, name only real metrics.

promtool is built from the Prometheus module by ``tools/promtool/build`` (``./dev setup``
runs it); without it these tests fail rather than skip, since a rule file nobody parsed
is exactly what they exist to prevent. The metric names the rules and the dashboard
use are checked against what a replica really exports: the runtime's ``Metrics``, plus
the metrics a drift detector and a serving streamlet report through their Context,
produced by running them and rendered by prometheus_client as ``/metrics`` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from streamflow import Inlet, Outlet
from streamflow.operator.kubernetes import monitoring
from streamflow.runtime.metrics import Metrics
from streamflow.streamlets.rollout import RolloutController
from streamflow.streamlets.serving import ModelServing
from streamflow.testkit import StreamletHarness
from tests.streamlets.drift import drift_support as drift
from tests.streamlets.rollout import rollout_support as rollouts

ROOT = Path(__file__).parents[2]
OPERATOR_DIR = ROOT / "operator"
ALERTS = OPERATOR_DIR / "monitoring" / monitoring.ALERTS_FILE
DASHBOARD = OPERATOR_DIR / "monitoring" / monitoring.DASHBOARD_FILE
ALERT_TESTS = Path(__file__).parent / "monitoring" / "alerts_test.yaml"
STREAMFLOW = Path(sys.executable).with_name("streamflow")
# What kube-state-metrics exports and the restart alert joins (not ours to check).
KUBE_STATE_METRICS = {"kube_pod_container_status_restarts_total", "kube_pod_labels"}
# Grafana's variables, replaced by values PromQL parses.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$app": "wine", "$streamlet": ".*"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and"}
PROMQL_WORDS |= {"or", "unless", "offset", "le", "inf", "nan"}
SELECTOR = re.compile(r"(?:\b([a-zA-Z_:][a-zA-Z0-9_:]*))?\s*\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def promtool_path() -> Path:
    folder = os.environ.get("STREAMFLOW_PROMTOOL_BIN") or ROOT / "tools" / "promtool" / "bin"
    return Path(folder) / "promtool"


@pytest.fixture(scope="module")
def promtool() -> Path:
    path = promtool_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it with tools/promtool/build (./dev setup does)")
    return path


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def rules() -> list[dict[str, Any]]:
    groups = YAML(typ="safe").load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return parsed


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every variable's series selector."""
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((.*), *(\w+)\)", variable["query"]["query"])
            assert found, f"variable {variable['name']}: expected label_values(SELECTOR, LABEL)"
            yield f"variable {variable['name']}", found.group(1)


def grafana_free(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr.replace("$1", ""), f"an unknown Grafana variable in {expr}"
    return expr


# -- the files ---------------------------------------------------------------------------------


def test_the_checked_in_files_are_the_package_files() -> None:
    for name, text in monitoring.files().items():
        stale = (
            f"operator/{name} is stale: run "
            "`streamflow operator manifests --monitoring --output-dir operator`"
        )
        assert (OPERATOR_DIR / name).read_text() == text, stale


def test_promtool_checks_the_rules(promtool: Path) -> None:
    result = run(promtool, "check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_each_alert_fires_when_it_should_and_not_on_its_near_misses(promtool: Path) -> None:
    result = run(promtool, "test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # ...and the test file really covers each alert both ways
    tests = YAML(typ="safe").load(ALERT_TESTS.read_text())["tests"]
    cases = [case for group in tests for case in group["alert_rule_test"]]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} is never seen firing"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} has no near miss"


def test_every_alert_waits_names_a_severity_and_explains_itself() -> None:
    for rule in rules():
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= annotations.keys(), rule["alert"]
        assert "$labels.app" in annotations["summary"], rule["alert"]
        assert "$labels" in annotations["description"], rule["alert"]


def test_the_dashboard_is_a_grafana_dashboard_per_app() -> None:
    board = dashboard()
    assert isinstance(board["schemaVersion"], int) and board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"app", "streamlet"} <= variables.keys()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"panel {panel['title']!r} overlaps another"
        taken |= cells
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            if "streamflow_" in target["expr"] and "kube_" not in target["expr"]:
                assert 'app="$app"' in target["expr"], panel["title"]
                assert 'streamlet=~"$streamlet"' in target["expr"], panel["title"]


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    # promtool parses (and lints) PromQL in rule files, so each query becomes a recording rule
    recorded = [
        {"record": f"dashboard:query_{i}", "expr": grafana_free(expr)}
        for i, (_, expr) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": recorded}]}))
    result = run(promtool, "check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


# -- only metrics a replica exports ------------------------------------------------------------


class WineServing(ModelServing):
    inp = Inlet("in", "examples.wine.WineFeatures")
    out = Outlet("out", "examples.wine.WinePrediction")


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Each sample name a replica serves on /metrics, with its label names."""
    metrics = Metrics(app="wine", streamlet="scorer", replica=0)
    for family in vars(metrics).values():  # each labelled family shows samples once it has a child
        if isinstance(family, MetricWrapperBase) and family._labelnames:
            family.labels(*("x" for _ in family._labelnames))
    detector = drift.harness(drift.InputDrift, window=200, reference_size=400)
    drift.settle(detector)
    detector.feed("in", drift.points(800, seed=3, shift=3.0, shift_at=600))
    detector.run()
    serving = StreamletHarness(
        WineServing,
        config={"input_fields": ["alcohol"], "output_field": "probabilities"},
        schema_paths=[ROOT / "schemas" / "examples" / "wine"],
    )
    serving.setup()
    serving.between_batches()  # the runtime exports what a streamlet reported after each turn
    controller = StreamletHarness(RolloutController)  # one rollout, rolled back
    controller.control("model", rollouts.descriptor(1), key="wine")
    controller.control("model", rollouts.candidate(2, "CANARY", 10.0), key="wine#candidate")
    controller.feed(
        "evidence", rollouts.window(0, stable=(90, 0, 0), candidate=(90, 0, 0), failures=10)
    )
    controller.run()
    samples: dict[str, set[str]] = {}
    registries = (metrics, detector.metrics, serving.metrics, controller.metrics)
    for registry in (r.registry for r in registries):
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def test_the_own_metrics_come_from_the_streamlets_that_report_them(
    exported: dict[str, set[str]],
) -> None:
    assert exported["streamflow_drift_detected"] >= {"app", "detector", "source", "partition"}
    assert exported["streamflow_drift_windows_total"] >= {"detector", "source", "drifted"}
    assert exported["streamflow_model_loaded"] == {"app", "streamlet", "replica"}
    assert exported["streamflow_rollout_decisions_total"] >= {"model", "verdict"}
    assert exported["streamflow_rollout_step"] >= {"model"}


def names_in(text: str) -> set[str]:
    text = re.sub(r'__name__=~\\?"[^"\\]*\\?"', "", text)  # a pattern: checked by the matchers
    found = set(re.findall(r"\b(?:streamflow|kube)_[a-zA-Z0-9_:]+\b", text))
    return {name for name in found if not name.startswith("streamflow_io")}


def matcher_problems(query: str, exported: dict[str, set[str]]) -> list[str]:
    """Label matchers that no exported series could satisfy: an unknown label, a dead pattern."""
    problems = []
    for name, matchers in SELECTOR.findall(grafana_free(query)):
        for label, value in MATCHER.findall(matchers):
            if name in exported and label not in exported[name]:
                problems.append(f"{name} has no label {label!r}")
            if label == "__name__" and not any(re.fullmatch(value, n) for n in exported):
                problems.append(f"no metric matches __name__=~{value!r}")
    return problems


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_rules_and_dashboard_name_only_metrics_a_replica_exports(
    source: str, exported: dict[str, set[str]]
) -> None:
    # the whole text, so a metric named in an annotation or a description counts too
    text = ALERTS.read_text() if source == "alerts" else DASHBOARD.read_text()
    used = names_in(text)
    assert used, "no metric found: the pattern is wrong"
    assert used - KUBE_STATE_METRICS <= exported.keys(), sorted(used - exported.keys())
    queries = (
        [r["expr"] for r in rules()] if source == "alerts" else [e for _, e in dashboard_queries()]
    )
    for query in queries:
        assert not matcher_problems(query, exported), query


def test_the_checks_catch_a_wrong_name_a_wrong_label_and_a_dead_pattern(
    exported: dict[str, set[str]],
) -> None:
    assert names_in('rate(streamflow_records_in_total{app="a"}[5m]) * kube_pod_labels') == {
        "streamflow_records_in_total",
        "kube_pod_labels",
    }
    assert names_in("label_streamflow_io_app") == set()
    assert names_in('{__name__=~\\"streamflow_records_(in|out)_total\\"}') == set()  # in JSON
    assert "streamflow_records_dlq" not in exported  # a counter is served as ..._total
    assert matcher_problems('streamflow_consumer_lag{app="$app", port="in"}', exported) == [
        "streamflow_consumer_lag has no label 'port'"
    ]
    assert matcher_problems('{__name__=~"streamflow_record_(in|out)_total"}', exported) == [
        "no metric matches __name__=~'streamflow_record_(in|out)_total'"
    ]


# -- as Kubernetes objects ---------------------------------------------------------------------


def test_operator_manifests_with_monitoring_carry_the_same_rules_and_dashboard() -> None:
    result = run(STREAMFLOW, "operator", "manifests", "--monitoring", "-n", "apps")
    assert result.returncode == 0, result.stderr
    documents = [d for d in YAML(typ="safe").load_all(result.stdout) if d]
    by_kind = {d["kind"]: d for d in documents}
    assert {"CustomResourceDefinition", "Deployment", "PrometheusRule", "ConfigMap"} <= set(by_kind)
    rule = by_kind["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "apps"
    assert rule["spec"]["groups"] == YAML(typ="safe").load(ALERTS.read_text())["groups"]
    board = by_kind["ConfigMap"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["data"][monitoring.DASHBOARD_KEY] == DASHBOARD.read_text()
    assert json.loads(board["data"][monitoring.DASHBOARD_KEY]) == dashboard()


def test_operator_manifests_writes_the_plain_files_with_output_dir(tmp_path: Path) -> None:
    result = run(STREAMFLOW, "operator", "manifests", "--monitoring", "--output-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "monitoring" / "alerts.yaml").read_text() == ALERTS.read_text()
    assert (tmp_path / "monitoring" / "grafana-dashboard.json").read_text() == DASHBOARD.read_text()
    assert (tmp_path / "crd.yaml").is_file()


def test_operator_manifests_help_documents_monitoring() -> None:
    result = run(STREAMFLOW, "operator", "manifests", "--help")
    assert result.returncode == 0
    assert "--monitoring" in result.stdout and "PrometheusRule" in result.stdout
