"""What the real Kubernetes node (`k8s_node.RealNode`) does to this host, and how it undoes it.

Each change outside the node's work dir has its undo beside it here, so a
reader can check that `stop()` leaves the host as it found it: a bridge,
ip_forward, a cgroup subtree, iptables chains, /var/log/containers links and
the mounts containerd and the kubelet make. Undo functions are best-effort and
never raise: a stop must go on to the next step whatever failed before.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from ipaddress import IPv4Network
from pathlib import Path

from streamflow.devkit.kafka import DevkitError

__all__ = [
    "BRIDGE_PREFIX",
    "CGROUP_PREFIX",
    "KEEP_MARKER",
    "add_bridge",
    "clean_iptables",
    "cni_config",
    "connects",
    "containerd_config",
    "die_with_parent",
    "enable_ip_forward",
    "free_port",
    "free_subnet",
    "healthy",
    "kill_cgroup_processes",
    "make_cgroup_root",
    "remove_bridge",
    "remove_cgroup_root",
    "remove_container_log_links",
    "restore_ip_forward",
    "run",
    "sweep_stale",
    "unmount_below",
]

CNI_DIR = Path("/usr/lib/cni")
BRIDGE_PREFIX = "sfnode"  # + 6 hex digits: a link name has at most 15 characters
CGROUP_PREFIX = "streamflow-node-"  # also the prefix of the nodes' temporary work dirs
KEEP_MARKER = ".keep"  # in a work dir that a stale-node sweep must not remove
_PR_SET_PDEATHSIG = 1
_CGROUPS = Path("/sys/fs/cgroup")
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
_CONTAINER_LOGS = Path("/var/log/containers")  # the kubelet's links; this path is fixed
# "unified" is the cgroup2 tree of a hybrid host, where runc makes a twin of each cgroup.
_CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
              "systemd", "hugetlb", "net_cls", "net_prio", "perf_event", "unified")  # fmt: skip
_RMDIR_WAIT_S = 5.0


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


def free_subnet(pool: IPv4Network) -> IPv4Network:
    """A /24 of `pool` that no route of this host overlaps (random, so two picks rarely race)."""
    used = [
        IPv4Network(route["dst"], strict=False)
        for table in ("main", "local")
        for route in json.loads(run("ip", "-j", "-4", "route", "show", "table", table) or "[]")
        if route["dst"] != "default"
    ]
    candidates = list(pool.subnets(new_prefix=24))
    random.shuffle(candidates)
    for candidate in candidates:
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise DevkitError(f"No free /24 left in {pool} for the real node's pods.")


def add_bridge(name: str, subnet: IPv4Network) -> str:
    """Create bridge `name` holding the subnet's first address, which it returns."""
    gateway = str(subnet.network_address + 1)
    run("ip", "link", "add", name, "type", "bridge")
    run("ip", "addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", name)
    run("ip", "link", "set", name, "up")
    return gateway


def remove_bridge(name: str) -> None:
    """Delete the bridge and any veth still attached (a pod whose network was not torn down)."""
    with contextlib.suppress(DevkitError, ValueError):
        for port in json.loads(run("ip", "-j", "link", "show", "master", name) or "[]"):
            with contextlib.suppress(DevkitError):
                run("ip", "link", "del", port["ifname"])
    with contextlib.suppress(DevkitError):
        run("ip", "link", "del", name)


def enable_ip_forward() -> str | None:
    """Turn IPv4 forwarding on: a Service's traffic to a pod on the bridge is routed back
    out through it. Returns the value to restore, or None when it was on already."""
    was = _IP_FORWARD.read_text().strip()
    if was == "1":
        return None
    _IP_FORWARD.write_text("1\n")
    return was


def restore_ip_forward(was: str | None) -> None:
    if was is not None:
        with contextlib.suppress(OSError):
            _IP_FORWARD.write_text(was + "\n")


def _hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies the kubelet uses (cgroups v2: the one unified tree)."""
    if (_CGROUPS / "cgroup.controllers").exists():
        return [_CGROUPS]
    return [_CGROUPS / name for name in _CGROUP_V1 if (_CGROUPS / name).is_dir()]


def make_cgroup_root(root: str) -> None:
    """Create the kubelet's `cgroupRoot` in every hierarchy.

    A new cpuset must be given CPUs and memory nodes, or no process can join it
    (runc then fails with a bare "can't get final child's PID from pipe: EOF").
    """
    for hierarchy in _hierarchies():
        folder = hierarchy / root.lstrip("/")
        folder.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists():
                (folder / knob).write_text((hierarchy / knob).read_text())


def kill_cgroup_processes(root: str, *, shim_marker: str) -> None:
    """SIGKILL what still runs under `root` (a container whose shim died), and the shims
    whose command line holds `shim_marker` (the node's containerd socket)."""
    for hierarchy in _hierarchies()[:1]:  # every process is in every hierarchy
        for procs in (hierarchy / root.lstrip("/")).rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError, ValueError):
            text = cmdline.read_text()
            if "containerd-shim" in text and shim_marker in text:
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


def remove_cgroup_root(root: str) -> None:
    """Remove the cgroup subtree, deepest first; a killed process takes a moment to leave."""
    deadline = time.monotonic() + _RMDIR_WAIT_S
    for hierarchy in _hierarchies():
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for folder in [*sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True), top]:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.05)


def unmount_below(folder: Path) -> None:
    """Unmount everything under `folder` (overlays, volumes, netns, shm), deepest first."""
    points: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if Path(point).is_relative_to(folder):
                points.add(point)
    for point in sorted(points, key=len, reverse=True):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30)


def clean_iptables(kube_proxy: Path | None) -> None:
    """kube-proxy's chains (its own --cleanup), then the kubelet's, which nothing else removes."""
    if kube_proxy is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, timeout=60)
    rules: list[tuple[str, ...]] = [
        *(("filter", "-D", chain, "-j", "KUBE-FIREWALL") for chain in ("INPUT", "OUTPUT")),
        ("filter", "-F", "KUBE-FIREWALL"),
        ("filter", "-X", "KUBE-FIREWALL"),
        *((table, "-X", "KUBE-KUBELET-CANARY") for table in ("mangle", "nat", "filter")),
        ("mangle", "-X", "KUBE-IPTABLES-HINT"),
    ]
    for tool in ("iptables", "ip6tables"):
        for table, *rule in rules:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run([tool, "-w", "-t", table, *rule], capture_output=True, timeout=30)


def remove_container_log_links(folder: Path) -> None:
    """Remove the kubelet's /var/log/containers links into `folder` (its pod logs)."""
    with contextlib.suppress(OSError):
        for link in _CONTAINER_LOGS.glob("*.log"):
            with contextlib.suppress(OSError):
                if Path(os.readlink(link)).is_relative_to(folder):
                    link.unlink()


def run(*command: str) -> str:
    """Run a host tool to completion; its stdout, or DevkitError with its stderr."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise DevkitError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def healthy(url: str) -> bool:
    """Whether a kube-proxy style /healthz answers `"healthy": true`."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return bool(json.loads(response.read()).get("healthy"))
    except (OSError, ValueError):
        return False


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def die_with_parent() -> None:
    """In a child before exec: be SIGKILLed when the parent dies, even by SIGKILL.

    So a killed test session leaves no kubelet, kube-proxy or containerd behind
    (containers and their shims it may leave: `sweep_stale` finds those).
    """
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def sweep_stale(kube_proxy: Path | None) -> list[str]:
    """Undo what nodes that died without `stop()` left; call it holding the host lock.

    Only one node runs per host at a time, so under the lock every node bridge,
    cgroup subtree, shim and iptables chain of ours is a dead node's. Returns
    what it removed, for the caller to mention.
    """
    removed: list[str] = []
    for hierarchy in _hierarchies():  # containers and shims first: they hold mounts
        for top in hierarchy.glob(f"{CGROUP_PREFIX}*"):
            kill_cgroup_processes(top.name, shim_marker=f"/{CGROUP_PREFIX}")
            remove_cgroup_root(top.name)
            removed.append(f"cgroup /{top.name}")
    removed += [f"the processes of {folder}" for folder in _stop_stale_work_dirs()]
    with contextlib.suppress(DevkitError, ValueError):
        for link in json.loads(run("ip", "-j", "link", "show", "type", "bridge") or "[]"):
            if link["ifname"].startswith(BRIDGE_PREFIX):
                remove_bridge(link["ifname"])
                removed.append(f"bridge {link['ifname']}")
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4]
            if f"/{CGROUP_PREFIX}" in point and "/sys/fs/cgroup" not in point:
                subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30)
    chains = subprocess.run(["iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES"],
                            capture_output=True, timeout=30, check=False)  # fmt: skip
    if chains.returncode == 0:
        clean_iptables(kube_proxy)
        removed.append("kube-proxy's iptables chains")
    return sorted(set(removed))


def _stop_stale_work_dirs() -> list[Path]:
    """Kill what dead nodes' clusters run (kwokctl's pid files name it), and remove
    their work dirs from the temp folder unless they were to be kept."""
    stale = list(Path(tempfile.gettempdir()).glob(f"{CGROUP_PREFIX}*"))
    for folder in stale:
        for pid_file in folder.glob("cluster/kwok/clusters/*/pids/*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().strip())
                # The pid may have been reused since: kill it only if it is still ours.
                if str(folder) in Path(f"/proc/{pid}/cmdline").read_text():
                    os.kill(pid, signal.SIGKILL)
        unmount_below(folder)
        if not (folder / KEEP_MARKER).exists():
            shutil.rmtree(folder, ignore_errors=True)
    return stale
