"""The real node touches a host's iptables only where a node of ours made the rules.

A developer's machine may run its own Kubernetes (k3s, a kubelet, kube-proxy):
the node must refuse to start there rather than fight over, or later delete,
that cluster's chains. These tests fake `iptables` and the marker file, so they
run anywhere, a host with Kubernetes of its own included.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from streamflow.devkit import _local, _node_host
from streamflow.devkit.kafka import DevkitError


class FakeIptables:
    """`iptables -S CHAIN` answers 0 for the chains the host has; records every call."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)  # "iptables nat/KUBE-SERVICES"
        self.calls: list[list[str]] = []

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append(command)
        code = 0
        if "-S" in command:  # iptables -w -t TABLE -S CHAIN: does the chain exist?
            tool, table, chain = command[0], command[3], command[-1]
            code = 0 if f"{tool} {table}/{chain}" in self.present else 1
        return subprocess.CompletedProcess(command, code, b"", b"")


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "streamflow-real-node.iptables"
    monkeypatch.setattr(_node_host, "IPTABLES_MARKER", path)
    return path


def test_a_hosts_own_kubernetes_chains_refuse_the_start(
    marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_node_host.subprocess, "run", FakeIptables("iptables nat/KUBE-SERVICES"))
    with pytest.raises(DevkitError, match=r"iptables nat/KUBE-SERVICES.*its own kube-proxy"):
        _node_host.refuse_foreign_chains()


def test_chains_a_node_of_ours_made_are_not_foreign(
    marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker.write_text("node-1\n")
    monkeypatch.setattr(_node_host.subprocess, "run", FakeIptables("iptables nat/KUBE-SERVICES"))
    _node_host.refuse_foreign_chains()  # no error


def test_without_our_marker_the_cleanup_touches_nothing(
    marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeIptables("iptables nat/KUBE-SERVICES", "iptables filter/KUBE-FIREWALL")
    monkeypatch.setattr(_node_host.subprocess, "run", fake)
    assert _node_host.clean_iptables(Path("/nonexistent/kube-proxy")) is False
    assert fake.calls == []  # neither kube-proxy --cleanup nor any iptables -D/-F/-X


def test_with_our_marker_the_cleanup_runs_and_drops_the_marker(
    marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker.write_text("node-1\n")
    fake = FakeIptables()
    monkeypatch.setattr(_node_host.subprocess, "run", fake)
    assert _node_host.clean_iptables(Path("/opt/kube-proxy")) is True
    assert fake.calls[0] == ["/opt/kube-proxy", "--cleanup"]
    assert not marker.exists()


def test_every_component_of_a_cluster_gets_a_port_of_its_own() -> None:
    """Ports picked one by one could repeat: the parallel suite once handed kube-apiserver
    and etcd's peer listener the same one, and the cluster never started."""
    for _ in range(50):
        ports = _local.free_ports(7)
        assert len(set(ports)) == 7
