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
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from ipaddress import IPv4Network
from pathlib import Path
from typing import IO

from streamflow.devkit import _local
from streamflow.devkit.kafka import DevkitError

__all__ = [
    "BRIDGE_PREFIX",
    "CGROUP_PREFIX",
    "IPTABLES_MARKER",
    "KEEP_MARKER",
    "LOCK_PATH",
    "add_bridge",
    "clean_iptables",
    "connects",
    "ctr",
    "ctr_ok",
    "die_with_parent",
    "enable_ip_forward",
    "foreign_chains",
    "free_port",
    "free_subnet",
    "healthy",
    "kill_cgroup_processes",
    "make_cgroup_root",
    "mark_iptables",
    "refuse_foreign_chains",
    "remove_bridge",
    "remove_cgroup_root",
    "remove_container_log_links",
    "remove_containers",
    "restore_ip_forward",
    "run",
    "sweep_stale",
    "take_lock",
    "unmount_below",
]

BRIDGE_PREFIX = "sfnode"  # + 6 hex digits: a link name has at most 15 characters
CGROUP_PREFIX = "streamflow-node-"  # also the prefix of the nodes' temporary work dirs
KEEP_MARKER = ".keep"  # in a work dir that a stale-node sweep must not remove
# Written before the kubelet starts, removed once its and kube-proxy's chains are:
# the only licence to remove KUBE-* chains, which a host's own Kubernetes also makes.
LOCK_PATH = Path("/run/streamflow-real-node.lock")
IPTABLES_MARKER = Path("/run/streamflow-real-node.iptables")
# The chains kube-proxy and the kubelet make, by table: (table, chain).
_KUBE_CHAINS = (("nat", "KUBE-SERVICES"), ("filter", "KUBE-FIREWALL"),
                ("mangle", "KUBE-KUBELET-CANARY"))  # fmt: skip
_WORK_DIR_NAME = re.compile(re.escape(CGROUP_PREFIX) + r"[a-z0-9_]{8}")  # mkdtemp's names
_PR_SET_PDEATHSIG = 1
_CGROUPS = Path("/sys/fs/cgroup")
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
_CONTAINER_LOGS = Path("/var/log/containers")  # the kubelet's links; this path is fixed
# "unified" is the cgroup2 tree of a hybrid host, where runc makes a twin of each cgroup.
_CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
              "systemd", "hugetlb", "net_cls", "net_prio", "perf_event", "unified")  # fmt: skip
_RMDIR_WAIT_S = 5.0


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


def mark_iptables(owner: str) -> None:
    """Record that a node of ours is about to make KUBE-* chains (before the kubelet starts)."""
    IPTABLES_MARKER.write_text(owner + "\n")


def foreign_chains() -> list[str]:
    """The KUBE-* chains on this host that no marker of ours explains ("table/chain").

    A host that runs its own Kubernetes (k3s, a kubelet, kube-proxy) has them; a
    node of ours would fight its rules, and our cleanup would delete them.
    """
    if IPTABLES_MARKER.exists():
        return []
    found: list[str] = []
    for tool in ("iptables", "ip6tables"):
        for table, chain in _KUBE_CHAINS:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                listed = subprocess.run([tool, "-w", "-t", table, "-S", chain],
                                        capture_output=True, timeout=30, check=False)  # fmt: skip
                if listed.returncode == 0:
                    found.append(f"{tool} {table}/{chain}")
    return found


def refuse_foreign_chains() -> None:
    """Raise when `foreign_chains` finds any: this host runs a Kubernetes of its own."""
    if foreign := foreign_chains():
        raise DevkitError(
            f"This host has Kubernetes iptables chains that no real node of ours made "
            f"({', '.join(foreign)}): it runs its own kube-proxy or kubelet (k3s, kind, a "
            "cluster node). A real node here would fight over those rules and its cleanup "
            "would delete them. Run the real-node tests on a machine or VM without "
            "Kubernetes, or stop that Kubernetes and remove its chains "
            "(`kube-proxy --cleanup`) first."
        )


def clean_iptables(kube_proxy: Path | None) -> bool:
    """Remove kube-proxy's chains (its own --cleanup), then the kubelet's, which nothing
    else removes; only when `IPTABLES_MARKER` says a node of ours made them.

    Call it holding the host lock: then the marker is ours or a dead node's.
    Returns whether it cleaned.
    """
    if not IPTABLES_MARKER.exists():
        return False
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
    with contextlib.suppress(OSError):
        IPTABLES_MARKER.unlink()
    return True


def remove_container_log_links(folder: Path) -> None:
    """Remove the kubelet's /var/log/containers links into `folder` (its pod logs)."""
    with contextlib.suppress(OSError):
        for link in _CONTAINER_LOGS.glob("*.log"):
            with contextlib.suppress(OSError):
                if Path(os.readlink(link)).is_relative_to(folder):
                    link.unlink()


def ctr(socket_path: Path, *args: str, what: str, timeout: float = 60.0) -> str:
    """`ctr` against the node's containerd (namespace k8s.io); its stdout, or DevkitError."""
    command = ["ctr", f"--address={socket_path}", "--namespace=k8s.io", *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise DevkitError(f"containerd could not {what} within {timeout:.0f} s.") from error
    if result.returncode != 0:
        raise DevkitError(f"containerd could not {what}: {result.stderr.strip()}")
    return result.stdout


def archive_names(archive: Path) -> set[str]:
    """The image references an archive carries: an OCI archive's ref names in
    index.json, a docker-save archive's RepoTags in manifest.json; none when unreadable."""
    try:
        with tarfile.open(archive) as tar:
            documents = {m.name: tar.extractfile(m) for m in tar if m.name in _ARCHIVE_INDEXES}
            parsed = {name: json.load(file) for name, file in documents.items() if file}
    except (OSError, tarfile.TarError, ValueError):
        return set()
    names: set[str] = set()
    index = parsed.get("index.json")
    for entry in index.get("manifests", []) if isinstance(index, dict) else []:
        annotations = entry.get("annotations") if isinstance(entry, dict) else None
        if isinstance(annotations, dict) and _REF_NAME in annotations:
            names.add(str(annotations[_REF_NAME]))
    manifest = parsed.get("manifest.json")
    for entry in manifest if isinstance(manifest, list) else []:
        tags = entry.get("RepoTags") if isinstance(entry, dict) else None
        names |= {str(tag) for tag in tags or []}
    return names


_ARCHIVE_INDEXES = ("index.json", "manifest.json")
_REF_NAME = "org.opencontainers.image.ref.name"


def ctr_ok(socket_path: Path) -> bool:
    """Whether the node's containerd answers."""
    try:
        ctr(socket_path, "version", what="answer", timeout=10.0)
    except DevkitError:
        return False
    return True


def remove_containers(socket_path: Path) -> None:
    """Kill and delete every task and container, so no shim outlives containerd."""
    with contextlib.suppress(DevkitError):
        for task in ctr(socket_path, "tasks", "ls", "-q", what="list tasks").split():
            with contextlib.suppress(DevkitError):
                ctr(socket_path, "tasks", "delete", "--force", task, what=f"delete task {task}")
        for container in ctr(socket_path, "containers", "ls", "-q", what="list containers").split():
            with contextlib.suppress(DevkitError):
                ctr(socket_path, "containers", "delete", container, what=f"delete {container}")


def run(*command: str) -> str:
    """Run a host tool to completion; its stdout, or DevkitError with its stderr."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise DevkitError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout


def free_port(host: str) -> int:
    """A port free now on ``host``."""
    return _local.free_ports(hosts=[host])[0]


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


def take_lock(deadline: float) -> IO[str]:
    """The host lock (one real node per host), polled until `deadline`; close it to release."""
    lock = LOCK_PATH.open("a+")
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.close()
                raise DevkitError(
                    f"Another real node holds {LOCK_PATH} (one per host: kube-proxy's "
                    "iptables chains are host-wide). Stop it, or wait for its tests."
                ) from None
            time.sleep(0.25)


def sweep_stale(kube_proxy: Path | None) -> list[str]:
    """Undo what nodes that died without `stop()` left; call it holding the host lock.

    Only one node runs per host at a time, so under the lock every node bridge,
    cgroup subtree and shim of ours is a dead node's, and so are the iptables
    chains when a marker of ours is left; without one, KUBE-* chains are not ours. Returns
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
    if clean_iptables(kube_proxy):  # only with a dead node's marker: never a host's own
        removed.append("kube-proxy's and the kubelet's iptables chains")
    return sorted(set(removed))


def _stop_stale_work_dirs() -> list[Path]:
    """Kill what dead nodes' clusters run (kwokctl's pid files name it), and remove
    their work dirs from the temp folder unless they were to be kept."""
    stale = [
        folder
        for folder in Path(tempfile.gettempdir()).glob(f"{CGROUP_PREFIX}*")
        if _WORK_DIR_NAME.fullmatch(folder.name) and folder.is_dir()
    ]
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
