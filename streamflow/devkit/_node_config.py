"""The configuration files of the real node's components (`k8s_node.RealNode`).

Pure functions from the node's names, paths and addresses to each component's
config, kept apart from the code that starts the components so each setting
can carry its reason beside it.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

__all__ = ["CNI_DIR", "cni_config", "containerd_config", "kube_proxy_config", "kubelet_config"]

CNI_DIR = Path("/usr/lib/cni")


def containerd_config(folder: Path, *, cni_conf_dir: Path, sandbox_image: str) -> str:
    """containerd's config: every path under `folder`, runc without systemd, our pause image.

    `restrict_oom_score_adj`: this VM's root lacks CAP_SYS_RESOURCE, so a sandbox
    may not get the score -998 containerd gives it. Network namespaces are
    mounted under the state dir, so unmounting the work dir finds them.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{folder}/root"
state = "{folder}/state"
[grpc]
  address = "{folder}/containerd.sock"
[ttrpc]
  address = "{folder}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{sandbox_image}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{folder}/runc"
  [{cri}.cni]
    bin_dir = "{CNI_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def cni_config(bridge: str, subnet: IPv4Network, *, ipam_dir: Path) -> dict[str, object]:
    """One bridge, addresses from `subnet`, leases under `ipam_dir`, no masquerade (no iptables)."""
    ipam = {
        "type": "host-local",
        "dataDir": str(ipam_dir),
        "ranges": [[{"subnet": str(subnet), "gateway": str(subnet.network_address + 1)}]],
        "routes": [{"dst": "0.0.0.0/0"}],
    }
    plugin = {"type": "bridge", "bridge": bridge, "isGateway": True, "hairpinMode": True}
    return {"cniVersion": "0.4.0", "name": "streamflow", "plugins": [{**plugin, "ipam": ipam}]}


def kubelet_config(
    folder: Path, *, cgroup_root: str, containerd_socket: Path, address: str, port: int
) -> dict[str, object]:
    """The kubelet's config: its files under `folder`, serving on `address` (the bridge)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        # Open to anything that reaches `address` (see k8s_node's docstring): the
        # apiserver has no client certificate to present for logs and exec.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "resolvConf": str(folder / "resolv.conf"),
        "podLogsDir": str(folder / "pod-logs"),
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "protectKernelDefaults": False,
        "enforceNodeAllocatable": [],
        "imageGCHighThresholdPercent": 100,  # the imported images cannot be pulled again
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
    }  # fmt: skip


def kube_proxy_config(
    *, kubeconfig: Path, node_name: str, pod_subnet: str, node_address: str,
    healthz: str, metrics: str,
) -> dict[str, object]:  # fmt: skip
    """kube-proxy's config: iptables mode, NodePorts only on the node's address."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": pod_subnet,
        "healthzBindAddress": healthz,
        "metricsBindAddress": metrics,
        "nodePortAddresses": [f"{node_address}/32"],
        "oomScoreAdj": 0,
        # Zeros leave the host's conntrack sysctls alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
    }  # fmt: skip
