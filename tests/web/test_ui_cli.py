"""``streamflow ui``'s mistakes a user can make, and the operator's Service for the web view."""

from __future__ import annotations

import socket
from pathlib import Path

from typer.testing import CliRunner

from streamflow.cli.main import app
from streamflow.operator.kubernetes import manifests


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["ui", *args], env={"STREAMFLOW_HOME": str(tmp_path), "COLUMNS": "200"}
    )
    return result.exit_code, result.output


def test_an_unknown_app_is_an_error_before_anything_is_served(tmp_path: Path) -> None:
    code, text = run(tmp_path, "nope", "--port", "0")
    assert code == 1
    assert "no application 'nope' is deployed on the local target" in text
    assert "streamflow deploy" in text  # the hint, as nothing is deployed
    assert "Traceback" not in text


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, text = run(tmp_path, "--port", str(port))
    assert code == 1
    assert f"port {port} on 127.0.0.1 is already in use; pick another with --port" in text


def test_the_help_says_it_is_read_only() -> None:
    result = CliRunner().invoke(app, ["ui", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Read-only" in result.output and "--port" in result.output


def test_the_exposed_operator_manifests_serve_the_web_view_behind_a_service() -> None:
    text = manifests.files(expose_ui=True)["operator-deployment.yaml"]
    assert "- --ui-port=8081" in text
    assert "kind: Service\n" in text and "name: streamflow-ui" in text
    assert "type: ClusterIP" in text and "targetPort: ui" in text
    service = manifests.ui_service(namespace="apps")
    assert service["metadata"]["namespace"] == "apps"
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": manifests.ACCOUNT}
