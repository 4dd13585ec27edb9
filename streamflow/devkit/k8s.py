"""A real Kubernetes control plane with simulated nodes, started by kwokctl from local binaries.

Why real components rather than a fake API: the operator's correctness rests on
the API server's semantics (admission, CRD validation, resourceVersions, watches)
and on the controllers that act on what it writes (ReplicaSets recreating pods,
EndpointSlices following Services). Only the kubelet is simulated: kwok marks
pods Running and Ready on fake nodes (with pod IPs), so a cluster fits on a
2-core machine next to a Kafka broker and needs no container runtime. Nothing
runs in those pods and there is no kube-proxy: a Service gets its ClusterIP and
EndpointSlices, but no traffic reaches a pod.

Design choices, each for a reason:

* The binaries come from `tools/k8s/build` (Go modules pinned in the repo), never
  from a download at run time: kwokctl is given an explicit path for each one,
  so it has nothing to fetch, and it runs with `KWOK_WORKDIR` inside our own
  work dir, so it reads and writes nothing under `~/.kwok` or `~/.kube`.
* Each cluster gets a unique name and free loopback ports for every component,
  so parallel test sessions (or a developer's own kwok cluster) never collide,
  and nothing listens beyond 127.0.0.1. The one exception is asked for by
  `apiserver_address`: a real node's pods (`k8s_node.RealNode`) reach the
  apiserver through the `kubernetes` Service, whose endpoint is the address the
  apiserver advertises, so that must be one they can route to. kwokctl's own
  clients and etcd stay on loopback, so the apiserver then listens on every
  address (its clients still need a certificate), and its certificate names
  that address and the Service's ClusterIP.
* The kube-apiserver is trimmed (no API priority and fairness, no profiling,
  small watch caches): the tests need its semantics, not its throughput.
* Readiness is a condition polled until a deadline (`/readyz`, then every node
  Ready, then the `default` ServiceAccount that pod admission needs), never a
  fixed sleep. A failed start quotes the tail of each component's log.
* kwokctl runs the components as detached processes, so we watch their pids:
  a component that dies while the cluster starts fails the start at once, with
  its log first. `stop()` asks kwokctl to delete the cluster, kills any pid it
  left behind and waits until all are gone; an atexit hook stops clusters a
  careless session forgot.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from streamflow.devkit import _local
from streamflow.devkit.kafka import DevkitError

__all__ = ["KUBE_BINARIES", "KubeCluster", "find_k8s_bin", "find_kubectl"]

KUBE_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kwok",
    "kwokctl",
)

_BUILD_HINT = "Run `tools/k8s/build` (about 9 minutes on 2 cores the first time)."
_BIN_ENV = "STREAMFLOW_K8S_BIN"
_KUBECTL_ENV = "STREAMFLOW_KUBECTL"
_BIN_RELATIVE = Path("tools") / "k8s" / "bin"
_HOST = "127.0.0.1"
_POLL_INTERVAL_S = 0.25
_KWOKCTL_TIMEOUT_S = 60.0
_STOP_WAIT_S = 10.0
_PROC = Path("/proc")

# Services' ClusterIPs, explicit so the certificate can name the `kubernetes` one.
_SERVICE_RANGE = "10.96.0.0/16"
_SERVICE_IP = "10.96.0.1"

_OTHER_PORTS = (
    "etcd-port",
    "kube-controller-manager-port",
    "kube-scheduler-port",
    "controller-port",  # the kwok controller's
)

# `component=flag=value` for kwokctl's --extra-args: what the tests don't need.
_LEAN_ARGS = (
    "kube-apiserver=enable-priority-and-fairness=false",
    "kube-apiserver=profiling=false",
    "kube-apiserver=default-watch-cache-size=10",
    "kube-controller-manager=profiling=false",
    "kube-scheduler=profiling=false",
)


def find_k8s_bin(*, bin_dir: Path | None = None) -> Path:
    """Where the control-plane binaries are: `bin_dir`, `$STREAMFLOW_K8S_BIN`, or `tools/k8s/bin`.

    The last is searched upwards from the current directory and from this package.
    """
    explicit = bin_dir or (Path(env) if (env := os.environ.get(_BIN_ENV)) else None)
    if explicit is not None:
        return _checked_bin(explicit.expanduser())
    found = _local.find_upwards(_BIN_RELATIVE)
    if found is not None:
        return _checked_bin(found)
    raise DevkitError(
        f"No Kubernetes binaries found: {_BIN_RELATIVE} is not above {Path.cwd()} or the "
        f"streamflow package, and ${_BIN_ENV} is not set. {_BUILD_HINT}"
    )


def _checked_bin(folder: Path) -> Path:
    missing = [name for name in KUBE_BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise DevkitError(
            f"{folder} lacks the Kubernetes binaries {', '.join(missing)}. {_BUILD_HINT}"
        )
    return folder.resolve()


def find_kubectl() -> Path:
    """The `kubectl` of `$STREAMFLOW_KUBECTL`, else the one on PATH."""
    if explicit := os.environ.get(_KUBECTL_ENV):
        if not os.access(explicit, os.X_OK):
            raise DevkitError(f"${_KUBECTL_ENV} is {explicit}, which is not an executable.")
        return Path(explicit)
    if found := shutil.which("kubectl"):
        return Path(found)
    raise DevkitError("No `kubectl` on PATH: install it (apt-get install kubernetes-client).")


class KubeCluster(_local.LocalService):
    """A kwok cluster: real etcd, apiserver, controller-manager and scheduler; fake nodes."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        name: str | None = None,
        work_dir: Path | None = None,
        nodes: int = 2,
        apiserver_address: str | None = None,
        keep: bool = False,
    ) -> None:
        """`nodes` kwok fake nodes (0 for none); `apiserver_address`: see the module's docstring."""
        if nodes < 0:
            raise ValueError(f"nodes must be 0 or more, not {nodes}")
        self._bin_dir = bin_dir
        self._name = name or f"streamflow-{uuid.uuid4().hex[:8]}"
        self._given_work_dir = work_dir
        self._nodes = nodes
        self._apiserver_address = apiserver_address
        self._keep = keep
        self._work_dir: Path | None = None
        self._bin: Path | None = None
        self._kubectl: Path | None = None
        self._port: int | None = None
        self._peer_port = 0
        self._other_ports: list[int] = []

    def __repr__(self) -> str:
        where = self.server if self._port else "not started"
        return f"KubeCluster({self._name}, {where})"

    @property
    def name(self) -> str:
        """The kwokctl cluster name (unique unless given)."""
        return self._name

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificates) of the running cluster."""
        return self._cluster_dir / "kubeconfig.yaml"

    @property
    def server(self) -> str:
        """The apiserver's URL."""
        if self._port is None:
            raise DevkitError("The Kubernetes cluster has not been started.")
        return f"https://{_HOST}:{self._port}"

    @property
    def work_dir(self) -> Path | None:
        """The folder that holds kwokctl's work dir (config, pki, etcd data, logs), once started."""
        return self._work_dir

    def start(self, *, timeout: float = 120.0) -> None:
        """Create the cluster and its nodes, and wait until pods can be scheduled and run."""
        if self._port is not None:
            return
        deadline = time.monotonic() + timeout
        self._bin = find_k8s_bin(bin_dir=self._bin_dir)
        self._kubectl = find_kubectl()
        self._work_dir = self._prepare_work_dir()
        # every component's port at once, so no two of them are handed the same one
        self._port, self._peer_port, *self._other_ports = _local.free_ports(2 + len(_OTHER_PORTS))
        _running.add(self)
        try:
            self._write_config()
            self._kwokctl(*self._create_args(), what="create the cluster", deadline=deadline)
            self._wait_for(deadline, "the apiserver to be ready", self._apiserver_ready)
            if self._nodes:
                scale = ("scale", "node", f"--replicas={self._nodes}")
                self._kwokctl(*scale, what="add nodes", deadline=deadline)
                self._wait_for(deadline, f"{self._nodes} Ready nodes", self._nodes_ready)
            self._wait_for(deadline, "the default ServiceAccount", self._default_account)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Delete the cluster, kill anything left over and remove the work dir. Idempotent."""
        _running.discard(self)
        if self._port is None:
            return
        pids = list(self._components().values())  # the deletion removes the pid files
        # kwokctl removes its context from the kubeconfig it is given, and rejects "":
        # name the cluster's own, which the deletion removes anyway.
        delete = ("delete", "cluster", f"--kubeconfig={self.kubeconfig}")
        deadline = time.monotonic() + _KWOKCTL_TIMEOUT_S
        with contextlib.suppress(DevkitError):
            self._kwokctl(*delete, what="delete the cluster", deadline=deadline, watch=False)
        _kill_and_wait(pids)
        if self._work_dir is not None and self._given_work_dir is None and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None
        self._port = None

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, a failure raises DevkitError."""
        if self._kubectl is None or self._port is None:
            raise DevkitError("The Kubernetes cluster has not been started.")
        command = [str(self._kubectl), f"--kubeconfig={self.kubeconfig}", *args]
        try:
            result = subprocess.run(
                command, input=input, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise DevkitError(f"`kubectl {' '.join(args)}` ran past {timeout} s.") from error
        if check and result.returncode != 0:
            raise DevkitError(
                f"`kubectl {' '.join(args)}` failed (exit {result.returncode}):\n"
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    @property
    def _kwok_dir(self) -> Path:
        if self._work_dir is None:
            raise DevkitError("The Kubernetes cluster has not been started.")
        return self._work_dir / "kwok"

    @property
    def _cluster_dir(self) -> Path:
        return self._kwok_dir / "clusters" / self._name

    def _prepare_work_dir(self) -> Path:
        if self._given_work_dir is not None:
            self._given_work_dir.mkdir(parents=True, exist_ok=True)
            return self._given_work_dir.resolve()
        return Path(tempfile.mkdtemp(prefix="streamflow-k8s-"))

    def _write_config(self) -> None:
        """Bind every component to loopback (kwokctl's default is 0.0.0.0, and etcd has no auth).

        kwokctl has no flags for these; it reads `$KWOK_WORKDIR/kwok.yaml` on every call.
        """
        self._kwok_dir.mkdir(parents=True, exist_ok=True)
        options: dict[str, object] = {"bindAddress": _HOST, "etcdPeerPort": self._peer_port}
        if self._apiserver_address is not None:
            options["kubeApiserverCertSANs"] = [self._apiserver_address, _SERVICE_IP]
        config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
        }
        (self._kwok_dir / "kwok.yaml").write_text(json.dumps(config, indent=2) + "\n")

    def _create_args(self) -> list[str]:
        assert self._bin is not None and self._port is not None
        binaries = {
            "kube-apiserver-binary": "kube-apiserver",
            "kube-controller-manager-binary": "kube-controller-manager",
            "kube-scheduler-binary": "kube-scheduler",
            "etcd-binary": "etcd",
            "kwok-controller-binary": "kwok",
        }
        return [
            "create",
            "cluster",
            "--runtime=binary",
            f"--kube-apiserver-port={self._port}",
            # Ports of our own choosing: kwokctl counts down from 32765, so clusters
            # started at the same moment in separate work dirs could pick the same.
            *(
                f"--{flag}={port}"
                for flag, port in zip(_OTHER_PORTS, self._other_ports, strict=True)
            ),
            "--kubeconfig=",  # leave ~/.kube/config alone
            "--quiet-pull",
            *(f"--{flag}={self._bin / binary}" for flag, binary in binaries.items()),
            *(f"--extra-args={arg}" for arg in (*_LEAN_ARGS, *self._reachable_args())),
            # kwok's controller fakes every node's pods (it runs with --manage-all-nodes),
            # so a cluster for real nodes must not have one.
            *([] if self._nodes else ["--disable=kwok-controller"]),
        ]

    def _reachable_args(self) -> list[str]:
        """kube-apiserver flags that let a real node's pods and kubelet reach it (see above)."""
        if self._apiserver_address is None:
            return []
        return [
            "kube-apiserver=bind-address=0.0.0.0",  # after kwokctl's own, so this one wins
            f"kube-apiserver=advertise-address={self._apiserver_address}",
            f"kube-apiserver=service-cluster-ip-range={_SERVICE_RANGE}",
            # A node's Hostname address is its name, which nothing resolves.
            "kube-apiserver=kubelet-preferred-address-types=InternalIP",
        ]

    def _kwokctl(self, *args: str, what: str, deadline: float, watch: bool = True) -> None:
        """Run kwokctl to completion; with `watch`, fail as soon as a component dies."""
        assert self._bin is not None and self._kubectl is not None
        command = [str(self._bin / "kwokctl"), f"--name={self._name}", *args]
        env = {
            **os.environ,
            "KWOK_WORKDIR": str(self._kwok_dir),
            "KWOK_KUBECTL_BINARY": str(self._kubectl),
        }
        self._kwok_dir.mkdir(parents=True, exist_ok=True)
        with (self._kwok_dir.parent / "kwokctl.log").open("a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            done = f"kwokctl to {what}"
            self._wait_for(deadline, done, lambda: process.poll() is not None, watch=watch)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if process.returncode != 0:
            raise DevkitError(
                f"kwokctl could not {what} (exit {process.returncode}).{self._tails()}"
            )

    def _wait_for(
        self, deadline: float, what: str, condition: Callable[[], bool], *, watch: bool = True
    ) -> None:
        while not condition():
            if watch and (dead := self._dead_components()):
                raise DevkitError(
                    f"{', '.join(dead)} exited while waiting for {what}.{self._tails(first=dead)}"
                )
            if time.monotonic() >= deadline:
                raise DevkitError(f"Timed out waiting for {what}.{self._tails()}")
            time.sleep(_POLL_INTERVAL_S)

    def _apiserver_ready(self) -> bool:
        return self._succeeds("get", "--raw=/readyz")

    def _nodes_ready(self) -> bool:
        template = '{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
        result = self.kubectl("get", "nodes", f"-o=jsonpath={template}", check=False)
        statuses = result.stdout.split()
        return result.returncode == 0 and statuses.count("True") >= self._nodes

    def _default_account(self) -> bool:
        return self._succeeds("get", "serviceaccount", "default", "--namespace=default")

    def _succeeds(self, *args: str) -> bool:
        try:
            return self.kubectl(*args, check=False, timeout=10.0).returncode == 0
        except DevkitError:  # a hung request counts as not yet
            return False

    def _tails(self, *, first: Sequence[str] = ()) -> str:
        """The logs' last lines, those of the components in `first` first."""
        if self._work_dir is None:
            return ""
        logs_dir = self._cluster_dir / "logs"
        logs = [logs_dir / f"{name}.log" for name in first]
        with contextlib.suppress(OSError):
            logs += [path for path in sorted(logs_dir.glob("*.log")) if path not in logs]
        logs.append(self._work_dir / "kwokctl.log")
        text = "\n".join(part for path in logs if (part := _local.tail(path, lines=20)))
        kept = self._keep or self._given_work_dir is not None
        return f" Logs in {self._work_dir}:\n{text}" if kept else f"\n{text}"

    def _components(self) -> dict[str, int]:
        """Component name -> pid, from the pid files kwokctl writes."""
        pids: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for pid_file in (self._cluster_dir / "pids").glob("*.pid"):
                with contextlib.suppress(OSError, ValueError):
                    pids[pid_file.stem] = int(pid_file.read_text().strip())
        return pids

    def _dead_components(self) -> list[str]:
        return sorted(name for name, pid in self._components().items() if not _alive(pid))


def _kill_and_wait(pids: Sequence[int]) -> None:
    """SIGKILL what kwokctl left running (it SIGKILLs them itself), then wait until all are gone.

    Waiting means that when `stop()` returns, the ports and the memory are free again.
    """
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _STOP_WAIT_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (dead, not yet reaped by kwokctl) counts as dead."""
    if not _PROC.is_dir():  # no procfs: all we can ask is whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


_running: set[KubeCluster] = set()


@atexit.register
def _stop_all() -> None:
    """Stop clusters a crashed or careless session left running, so none outlives Python."""
    for cluster in list(_running):
        cluster.stop()
