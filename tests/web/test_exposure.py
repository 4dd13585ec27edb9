"""Who may read the web view (issue 42, finding 5): loopback by default, a token beyond it.

The view shows every application's snapshot, dead-letter keys and error headers,
which the operator reads with each application's Kafka Secret. The default
manifests bound it to 0.0.0.0 behind a ClusterIP Service with no authentication
and no Host check: any pod of the cluster could read it. And the operator's view
imported the modules a resource's classes named, from the resource's paths.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamflow.blueprint.model import Application
from streamflow.cli.main import app as cli
from streamflow.operator.kubernetes import manifests
from streamflow.operator.web import listen as serving
from tests.web.test_server import FakeTarget, served

TOKEN = "a-long-random-token-for-the-test"


def _get(
    address: tuple[str, int], path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*address, timeout=20)
    try:
        connection.request("GET", path, headers={"Host": "streamflow-ui", **(headers or {})})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _outside_address() -> str:
    """An address of this machine that is not loopback (the one its default route uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent for UDP connect
        return str(probe.getsockname()[0])


def test_the_default_manifests_keep_the_view_on_the_pods_loopback() -> None:
    text = manifests.files()["operator-deployment.yaml"]
    assert "- --ui-port=8081" in text
    assert "--ui-host" not in text  # 127.0.0.1, the default
    assert "kind: Service" not in text and "containerPort: 8081" not in text


def test_exposing_it_takes_a_token_a_network_policy_and_the_services_names() -> None:
    result = CliRunner().invoke(cli, ["operator", "manifests", "--expose-ui", "-n", "apps"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "- --ui-host=0.0.0.0" in text and "- --ui-token-env=STREAMFLOW_UI_TOKEN" in text
    assert "- --ui-allowed-host=streamflow-ui.apps.svc" in text
    assert "secretKeyRef:\n" in text and "name: streamflow-ui-token" in text
    assert "kind: Service\n" in text and "kind: NetworkPolicy\n" in text
    policy = manifests.ui_network_policy(namespace="apps")
    (admitted, liveness) = policy["spec"]["ingress"]
    assert admitted["from"] == [
        {"podSelector": {"matchLabels": {manifests.UI_CLIENT_LABEL: "true"}}}
    ]
    assert admitted["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert liveness == {"ports": [{"protocol": "TCP", "port": 8080}]}


def test_listening_beyond_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(serving.UiError, match="without a token: anyone who reaches it"):
        serving.check_exposure("0.0.0.0", serving.Access())
    serving.check_exposure("0.0.0.0", serving.Access(token=TOKEN))
    serving.check_exposure("127.0.0.1", serving.Access())
    result = CliRunner().invoke(cli, ["ui", "--host", "0.0.0.0", "--no-open"])
    assert result.exit_code == 1
    assert "without a token" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["ui", "--host", "0.0.0.0", "--token-env", "NOT_SET_HERE"])
    assert result.exit_code == 1 and "NOT_SET_HERE: the variable is not set" in result.output


def test_the_operator_refuses_to_expose_its_view_without_a_token(tmp_path: Path) -> None:
    """Before it reaches any cluster: the flags alone are wrong."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    answer = subprocess.run(
        [str(Path(sys.executable).with_name("streamflow")), "operator", "run", "--ui-port", "18081",
         "--ui-host", "0.0.0.0", "--ui-token-env", "STREAMFLOW_UI_TOKEN_UNSET",
         f"--kubeconfig={kubeconfig}"],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert answer.returncode == 1, answer.stdout + answer.stderr
    assert "STREAMFLOW_UI_TOKEN_UNSET: the variable is not set" in answer.stderr
    answer = subprocess.run(
        [str(Path(sys.executable).with_name("streamflow")), "operator", "run", "--ui-port", "18081",
         "--ui-host", "0.0.0.0", f"--kubeconfig={kubeconfig}"],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert answer.returncode == 1, answer.stdout + answer.stderr
    assert "would listen on 0.0.0.0 without a token" in " ".join(answer.stderr.split())


def test_an_exposed_view_answers_only_with_its_token() -> None:
    access = serving.Access(token=TOKEN, hosts=("streamflow-ui", "localhost"))
    with served(FakeTarget(), host="0.0.0.0", access=access) as (_, port):
        address = (_outside_address(), port)
        status, headers, body = _get(address, "/api/apps")
        assert status == 401 and "Bearer" in headers["www-authenticate"]
        assert b"/?token=TOKEN" in body
        assert _get(address, "/api/apps", {"Authorization": "Bearer wrong"})[0] == 401
        assert _get(address, "/api/apps", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        # a browser: the token once in the address, then the cookie (a digest, not the token)
        status, headers, _ = _get(address, f"/apps/demo?token={TOKEN}&x=1")
        assert status == 303 and headers["location"] == "/apps/demo?x=1"
        cookie = headers["set-cookie"].split(";")[0]
        assert TOKEN not in cookie and "HttpOnly" in headers["set-cookie"]
        assert "SameSite=Strict" in headers["set-cookie"]
        assert _get(address, "/api/apps/demo", {"Cookie": cookie})[0] == 200
        assert _get(address, "/api/apps/demo", {"Cookie": "streamflow-ui=forged"})[0] == 401
        # and a Host the view was not told to answer (DNS rebinding) is refused, token or not
        auth = {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}
        assert _get(address, "/api/apps", auth)[0] == 400


def test_the_operators_view_never_imports_an_applications_code(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    code = tmp_path / "code"
    code.mkdir()
    (code / "planted_app.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from streamflow import Inlet, Outlet, Streamlet\n"
        "class Source(Streamlet):\n    out = Outlet('out', 'streamflow.ml.Prediction')\n"
    )
    app = Application.from_dict(
        {
            "name": "demo",
            "python_paths": [str(code)],
            "streamlets": {"source": {"class": "planted_app:Source"}},
            "topics": {"numbers": {"producers": ["source.out"]}},
        }
    )

    class Target(FakeTarget):
        def application(self, name: str) -> Application:
            super().application(name)
            return app

    with served(Target(), access=serving.Access(import_code=False)) as address:
        connection = http.client.HTTPConnection(*address, timeout=20)
        connection.request("GET", "/api/apps/demo", headers={"Host": "localhost"})
        response = connection.getresponse()
        assert response.status == 200, response.read()
        graph = response.read()
        assert b"planted_app:Source" in graph  # the spec's graph, from the spec alone
    assert not marker.exists()
