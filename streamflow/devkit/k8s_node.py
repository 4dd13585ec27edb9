"""One real Kubernetes node: containerd and runc under a kubelet, kube-proxy, CNI bridge networking.

Why a real node next to kwok's fake ones: kwok marks pods Running but runs
nothing, so it cannot show that the operator's images start, read their config,
reach the apiserver through the `kubernetes` Service, or reach Kafka. This node
runs them for real, on this machine, as root (containerd and runc need it).

Design choices, each for a reason:

* The node brings its own cluster (`KubeCluster` with no fake nodes and no kwok
  controller, which would fake this node's pods too). Its pods need the
  apiserver on an address they can route to, and kube-proxy's iptables chains
  are host-wide, so the real node and its pods stay apart from the kwok
  clusters the other tests share.
* Networking is one Linux bridge with a /24 of its own, picked free of this
  host's routes. The bridge exists before the cluster starts: its gateway
  address is what the apiserver advertises, what pods reach the host on
  (`host_address`, e.g. for a Kafka broker listening there), and the kubelet's
  node IP. kube-proxy masquerades all Service traffic, so a Service whose pod is
  on the same bridge answers without br_netfilter.
* Everything lives in one work dir: containerd's root, state, socket and
  network namespaces, the kubelet's root and pod logs, the CNI config and its
  IP leases. Host-wide leftovers are few and named, and `stop()` removes them:
  the cgroup subtree (`cgroupRoot`), the bridge and its veths, kube-proxy's and
  the kubelet's iptables chains, /var/log/containers links, ip_forward.
* One real node per host at a time (a lock in /run): two kube-proxies would
  each delete the other's iptables rules. A second start waits for the lock.
  Nor may it share a host with a Kubernetes of its own (k3s, a kubelet, a
  kube-proxy): the start refuses when KUBE-* chains exist that no marker of
  ours (`_node_host.IPTABLES_MARKER`) explains, and only a marker licenses
  removing them.
* Not for a shared host: the kubelet serves on the bridge address with
  anonymous auth and AlwaysAllow (the apiserver has no client certificate),
  so anything that can reach that address, the node's pods included, may
  exec into its containers.
* This VM's root lacks CAP_SYS_RESOURCE, so no component may lower an OOM
  score: containerd restricts sandbox scores and the kubelet and kube-proxy
  keep their own. cgroups v1 needs the kubelet's `failCgroupV1: false`.
* The pause image cannot be pulled here: `tools/k8s/node-setup` builds it and a
  busybox test image as OCI archives, imported at every start (about a second).
  Images must be imported (`import_image`) and used with a pull policy that
  never pulls (a tag other than `latest`, or `imagePullPolicy: Never`).
* Readiness is conditions polled until a deadline, never sleeps: containerd
  answers, the Node is Ready, kube-proxy is healthy and the `kubernetes`
  Service's ClusterIP accepts connections. A failure quotes the logs' tails.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from ipaddress import IPv4Network
from pathlib import Path
from typing import IO

from streamflow.devkit import _local, k8s
from streamflow.devkit import _node_config as configs
from streamflow.devkit import _node_host as host
from streamflow.devkit.kafka import DevkitError

__all__ = ["NODE_BINARIES", "PAUSE_IMAGE", "TEST_IMAGE", "RealNode", "find_node_images"]

# The names tools/k8s/node-setup gives its images: keep them equal.
PAUSE_IMAGE = "localhost/streamflow-devkit/pause:1"
TEST_IMAGE = "localhost/streamflow-devkit/busybox:1"
NODE_BINARIES = ("kubelet", "kube-proxy")

_SETUP_HINT = "Run `sudo tools/k8s/node-setup` (Debian packages and the node's images)."
_HOST_TOOLS = ("containerd", "ctr", "runc", "iptables", "ip", "umount")
_CNI_PLUGINS = ("bridge", "host-local", "loopback")
_IMAGES_ENV = "STREAMFLOW_K8S_NODE_IMAGES"
_IMAGES_RELATIVE = Path("tools") / "k8s" / "node-images"
_ARCHIVES = ("pause.oci.tar", "busybox.oci.tar")
_SUBNET_POOL = IPv4Network("10.200.0.0/13")  # /24s from here; clear of the Service range
_POLL_S = 0.25
_GRACE_S = 5.0


def find_node_images(*, images_dir: Path | None = None) -> Path:
    """The folder of the node's image archives: `images_dir`, `$STREAMFLOW_K8S_NODE_IMAGES`,
    or `tools/k8s/node-images` above the working directory or this package."""
    env = os.environ.get(_IMAGES_ENV)
    folder = images_dir or (Path(env) if env else _local.find_upwards(_IMAGES_RELATIVE))
    missing = [name for name in _ARCHIVES if folder is None or not (folder / name).is_file()]
    if folder is None or missing:
        where = folder or _IMAGES_RELATIVE
        raise DevkitError(
            f"The real node's images ({', '.join(missing)}) are not in {where}. {_SETUP_HINT}"
        )
    return folder.resolve()


class RealNode(_local.LocalService):
    """A cluster whose one node is real: pods run in containerd, Services work, the host answers.

    `with RealNode() as node:` starts it; `node.kubectl(...)` talks to its cluster;
    pods reach the host at `node.host_address`; `node.import_image(archive)` makes an
    image available to pods.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        images_dir: Path | None = None,
        work_dir: Path | None = None,
        keep: bool = False,
    ) -> None:
        self._bin_dir = bin_dir
        self._images_dir = images_dir
        self._given_work_dir = work_dir
        self._keep = keep
        self._id = uuid.uuid4().hex[:8]
        self._name = f"streamflow-node-{self._id}"
        self._bridge = f"{host.BRIDGE_PREFIX}{self._id[:6]}"
        self._cgroup_root = f"/{host.CGROUP_PREFIX}{self._id}"
        self._work_dir: Path | None = None
        self._subnet: IPv4Network | None = None
        self._cluster: k8s.KubeCluster | None = None
        self._bin: Path | None = None
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._lock: IO[str] | None = None
        self._forward_was: str | None = None

    def __repr__(self) -> str:
        return f"RealNode({self._name}, {self._subnet or 'not started'})"

    @property
    def name(self) -> str:
        """The Node's name (unique)."""
        return self._name

    @property
    def cluster(self) -> k8s.KubeCluster:
        """The node's own cluster (`.kubeconfig`, `.kubectl(...)`)."""
        if self._cluster is None:
            raise DevkitError("The real node has not been started.")
        return self._cluster

    @property
    def host_address(self) -> str:
        """This host's address on the pods' bridge: what pods connect to for a host service."""
        return str(self._network.network_address + 1)

    @property
    def pod_subnet(self) -> str:
        """The pods' IP range (one /24)."""
        return str(self._network)

    @property
    def work_dir(self) -> Path | None:
        """The folder of all the node writes (configs, logs, containerd's root), once started."""
        return self._work_dir

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl` against the node's cluster; see `KubeCluster.kubectl`."""
        return self.cluster.kubectl(*args, input=input, check=check, timeout=timeout)

    def import_image(
        self, archive: Path, *, name: str | None = None, timeout: float = 600.0
    ) -> None:
        """Import an OCI (or docker-save) archive into the node's containerd, for pods to use.

        Pods refer to the image by the full reference the archive names (buildah's
        `push IMAGE oci-archive:FILE:IMAGE` writes one), or by `name` when given,
        which is the way to name an archive that carries only a tag or nothing.
        """
        if not archive.is_file():
            raise DevkitError(f"No image archive at {archive}.")
        # an archive that already names the image is imported as it is: `--index-name`
        # makes containerd write an index blob of its own, and that blob is what a
        # loaded CI run saw go missing ("content digest ...: not found"), three tries in a row
        naming = (
            [] if name is None or name in host.archive_names(archive) else [f"--index-name={name}"]
        )
        what = f"import {archive}"
        for attempt in range(3):
            try:
                self._ctr("images", "import", *naming, str(archive), timeout=timeout, what=what)
                return
            except DevkitError as error:
                # containerd 1.6 can collect a blob of an import in progress, which then
                # fails with "content digest ...: not found" on a complete archive; the
                # same import again, with the half-made image removed, finds it written
                if "content digest" not in str(error) or attempt == 2:
                    raise
                for ref in [name] if name else sorted(host.archive_names(archive)):
                    with contextlib.suppress(DevkitError):
                        self._ctr("images", "rm", ref, what=f"remove {ref}")

    def start(self, *, timeout: float = 180.0) -> None:
        """Start the cluster, containerd, the kubelet and kube-proxy; wait until pods can run."""
        if self._cluster is not None:
            return
        deadline = time.monotonic() + timeout
        self._bin, images = self._preflight()
        _running.add(self)
        try:
            self._take_host_lock(deadline)
            self._work_dir = self._prepare_work_dir()
            self._start_network()
            self._cluster = k8s.KubeCluster(
                bin_dir=self._bin_dir, nodes=0, apiserver_address=self.host_address,
                work_dir=self._work_dir / "cluster", keep=self._keep,
            )  # fmt: skip
            self._cluster.start(timeout=max(deadline - time.monotonic(), 1.0))
            host.make_cgroup_root(self._cgroup_root)
            self._start_containerd(deadline)
            for archive in _ARCHIVES:
                self.import_image(images / archive, timeout=max(deadline - time.monotonic(), 1.0))
            self._start_kubelet(self._bin, deadline)
            self._start_kube_proxy(self._bin, deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every pod's containers and every process, and undo what the node did to the host.

        Idempotent, and each step runs even when an earlier one fails.
        """
        _running.discard(self)
        for name in ("kubelet", "kube-proxy"):
            _local.terminate(self._processes.pop(name, None), grace=_GRACE_S)
        if self._work_dir is not None:
            host.clean_iptables(self._bin / "kube-proxy" if self._bin else None)
            if "containerd" in self._processes:
                host.remove_containers(self._work_dir / "containerd" / "containerd.sock")
            _local.terminate(self._processes.pop("containerd", None), grace=_GRACE_S)
            socket_path = str(self._work_dir / "containerd" / "containerd.sock")
            host.kill_cgroup_processes(self._cgroup_root, shim_marker=socket_path)
            host.unmount_below(self._work_dir)
            host.remove_cgroup_root(self._cgroup_root)
            host.remove_container_log_links(self._work_dir)
        if self._subnet is not None:
            host.remove_bridge(self._bridge)
            host.restore_ip_forward(self._forward_was)
            self._subnet = self._forward_was = None
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None
        if self._work_dir is not None and self._given_work_dir is None and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    # --- start, in order ---------------------------------------------------------

    def _preflight(self) -> tuple[Path, Path]:
        """Fail before touching anything when this host cannot run the node."""
        if os.geteuid() != 0:
            raise DevkitError("A real Kubernetes node needs root (containerd, runc, iptables).")
        missing = [tool for tool in _HOST_TOOLS if shutil.which(tool) is None]
        missing += [
            str(configs.CNI_DIR / p) for p in _CNI_PLUGINS if not (configs.CNI_DIR / p).exists()
        ]
        if missing:
            raise DevkitError(f"The real node lacks {', '.join(missing)}. {_SETUP_HINT}")
        bin_dir = k8s.find_k8s_bin(bin_dir=self._bin_dir)
        absent = [name for name in NODE_BINARIES if not os.access(bin_dir / name, os.X_OK)]
        if absent:
            raise DevkitError(f"{bin_dir} lacks {', '.join(absent)}. {k8s._BUILD_HINT}")
        return bin_dir, find_node_images(images_dir=self._images_dir)

    def _take_host_lock(self, deadline: float) -> None:
        self._lock = host.take_lock(deadline)
        if stale := host.sweep_stale(self._bin / "kube-proxy" if self._bin else None):
            print(f"streamflow: removed what a dead real node left: {', '.join(stale)}",
                  file=sys.stderr)  # fmt: skip
        host.refuse_foreign_chains()

    def _prepare_work_dir(self) -> Path:
        if self._given_work_dir is not None:
            self._given_work_dir.mkdir(parents=True, exist_ok=True)
            folder = self._given_work_dir.resolve()
        else:
            folder = Path(tempfile.mkdtemp(prefix=host.CGROUP_PREFIX))
        if self._keep:
            (folder / host.KEEP_MARKER).touch()
        if len(str(folder / "containerd" / "containerd.sock.ttrpc")) > 100:
            raise DevkitError(
                f"{folder} is too long a path for containerd's sockets; pick a shorter."
            )
        return folder

    def _start_network(self) -> None:
        self._subnet = host.free_subnet(_SUBNET_POOL)
        host.add_bridge(self._bridge, self._subnet)
        self._forward_was = host.enable_ip_forward()

    def _start_containerd(self, deadline: float) -> None:
        folder = self._dir("containerd")
        config = folder / "config.toml"
        cni_conf_dir = self._dir("cni", "net.d")
        config.write_text(
            configs.containerd_config(folder, cni_conf_dir=cni_conf_dir, sandbox_image=PAUSE_IMAGE)
        )
        network = configs.cni_config(self._bridge, self._network, ipam_dir=self._dir("cni", "ipam"))
        (cni_conf_dir / "10-streamflow.conflist").write_text(json.dumps(network, indent=2))
        self._spawn("containerd", ["containerd", f"--config={config}"])
        self._wait(
            deadline,
            "containerd to answer",
            lambda: host.ctr_ok(self._dir("containerd") / "containerd.sock"),
        )

    def _start_kubelet(self, bin_dir: Path, deadline: float) -> None:
        folder = self._dir("kubelet")
        (folder / "resolv.conf").write_text("")  # no cluster DNS: pods resolve nothing
        self._dir("kubelet", "pod-logs")
        config = configs.kubelet_config(
            folder, cgroup_root=self._cgroup_root, address=self.host_address,
            containerd_socket=self._dir("containerd") / "containerd.sock",
            port=host.free_port(self.host_address),
        )  # fmt: skip
        (folder / "config.yaml").write_text(json.dumps(config, indent=2))
        command = [
            str(bin_dir / "kubelet"),
            f"--config={folder / 'config.yaml'}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--root-dir={self._dir('kubelet', 'root')}",
            f"--cert-dir={self._dir('kubelet', 'pki')}",
            f"--hostname-override={self._name}",
            f"--node-ip={self.host_address}",
        ]
        host.mark_iptables(f"{self._name} {self._work_dir}")  # the kubelet makes KUBE-* chains
        self._spawn("kubelet", command)
        self._wait(deadline, f"the node {self._name} to be Ready", self._node_ready)

    def _start_kube_proxy(self, bin_dir: Path, deadline: float) -> None:
        folder = self._dir("kube-proxy")
        healthz = f"127.0.0.1:{host.free_port('127.0.0.1')}"
        config = configs.kube_proxy_config(
            kubeconfig=self.cluster.kubeconfig, node_name=self._name, pod_subnet=self.pod_subnet,
            node_address=self.host_address, healthz=healthz,
            metrics=f"127.0.0.1:{host.free_port('127.0.0.1')}",
        )  # fmt: skip
        (folder / "config.yaml").write_text(json.dumps(config, indent=2))
        self._spawn(
            "kube-proxy", [str(bin_dir / "kube-proxy"), f"--config={folder / 'config.yaml'}"]
        )
        self._wait(
            deadline, "kube-proxy to be healthy", lambda: host.healthy(f"http://{healthz}/healthz")
        )
        service = self.kubectl("get", "service", "kubernetes", "-o=jsonpath={.spec.clusterIP}")
        cluster_ip = service.stdout.strip()
        self._wait(
            deadline, f"the kubernetes Service ({cluster_ip}:443) to answer",
            lambda: host.connects(cluster_ip, 443),
        )  # fmt: skip

    # --- helpers -------------------------------------------------------------------

    @property
    def _network(self) -> IPv4Network:
        if self._subnet is None:
            raise DevkitError("The real node has not been started.")
        return self._subnet

    def _dir(self, *parts: str) -> Path:
        assert self._work_dir is not None
        folder = self._work_dir.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _spawn(self, name: str, command: list[str]) -> None:
        with (self._dir("logs") / f"{name}.log").open("ab") as log:
            self._processes[name] = subprocess.Popen(
                command, cwd=self._dir(name), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=host.die_with_parent,
            )  # fmt: skip

    def _ctr(self, *args: str, what: str, timeout: float = 60.0) -> str:
        socket_path = self._dir("containerd") / "containerd.sock"
        return host.ctr(socket_path, *args, what=what, timeout=timeout)

    def _node_ready(self) -> bool:
        template = '{.status.conditions[?(@.type=="Ready")].status}'
        with contextlib.suppress(DevkitError):
            result = self.kubectl("get", "node", self._name, f"-o=jsonpath={template}", check=False)
            return result.returncode == 0 and result.stdout.strip() == "True"
        return False

    def _wait(self, deadline: float, what: str, condition: Callable[[], bool]) -> None:
        while not condition():
            dead = [name for name, process in self._processes.items() if process.poll() is not None]
            if dead:
                raise DevkitError(
                    f"{', '.join(dead)} exited while waiting for {what}.{self._tails(dead)}"
                )
            if time.monotonic() >= deadline:
                raise DevkitError(f"Timed out waiting for {what}.{self._tails([])}")
            time.sleep(_POLL_S)

    def _tails(self, first: list[str]) -> str:
        names = [*first, *(n for n in ("kube-proxy", "kubelet", "containerd") if n not in first)]
        assert self._work_dir is not None
        text = "\n".join(
            t for n in names if (t := _local.tail(self._work_dir / "logs" / f"{n}.log", lines=20))
        )
        kept = self._keep or self._given_work_dir is not None
        return f" Logs in {self._work_dir / 'logs'}:\n{text}" if kept else f"\n{text}"


_running: set[RealNode] = set()


@atexit.register
def _stop_all() -> None:
    """Stop nodes a crashed or careless session left running, so none outlives Python."""
    for node in list(_running):
        node.stop()
