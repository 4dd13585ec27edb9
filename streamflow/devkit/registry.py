"""A real schema registry (Apicurio Registry), started from a Maven-built app as a local JVM.

Why Apicurio, and why from a local build: topics in the registry formats
(`avro-registry`, `json-registry`) need a registry that speaks the Confluent
Schema Registry API, including its compatibility checks, so tests and
`streamflow run` talk to a real one. Apicurio serves that API at
`/apis/ccompat/v7` and, unlike Confluent's, its server is on Maven Central;
`tools/registry/build` wraps it into a runnable Quarkus app in
`tools/registry/app` (see `tools/registry/pom.xml` for the version and why).

Design choices, each for a reason (the same as for the development Kafka):

* In-memory storage (H2), nothing on disk: each start is a fresh registry, so
  a test never sees an earlier session's subjects.
* The HTTP port is picked at start, on 127.0.0.1, and `url` is the base of the
  Confluent-compatible API, the URL a Confluent client takes.
* Global compatibility is BACKWARD, Confluent's default, so schema-evolution
  tests mean something. Apicurio's default is no rule at all; its
  `registry.rules.global.compatibility` setting enforces BACKWARD from the
  first request, but its ccompat `GET /config` still reports NONE until a
  `PUT /config` sets it, so we do both.
* Settings sized for a 2-core laptop: a fixed small heap, serial GC, C1 only
  (it starts faster), and a small connection pool.
* JVM output goes to `registry.log` in a work dir, quoted back when the
  registry fails, so a failure explains itself.
* The JVM runs in its own session, so Ctrl-C in a terminal reaches only us;
  an atexit hook stops any registry still running, so none outlives Python.
* Readiness is a condition (`GET <url>/subjects` answers 200), polled until a
  deadline, never a fixed sleep.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamflow.devkit import _local
from streamflow.devkit.java import SERVICE_FLAGS, ClassArchive
from streamflow.devkit.kafka import DevkitError, find_java

__all__ = ["SchemaRegistry", "find_registry_app"]

_HOST = "127.0.0.1"
_API_PATH = "/apis/ccompat/v7"
_APP_ENV = "STREAMFLOW_REGISTRY_APP"
_APP_RELATIVE = Path("tools") / "registry" / "app"
_APP_JAR = "quarkus-run.jar"
# Apicurio ships its server on Maven Central only as a library, so there is nothing
# pinned to fetch for an installed package: name the user's own ways instead.
_BUILD_HINT = (
    "Topics in a registry format need a schema registry: pass `--registry URL` (or set "
    "kafka.schema_registry in the blueprint) for any Confluent-compatible one, for example "
    "`docker run -p 8080:8080 apicurio/apicurio-registry-mem:2.4.2.Final` and then "
    "`--registry http://localhost:8080/apis/ccompat/v7`; in a streamflow checkout, "
    "`tools/registry/build` (or `./dev setup`) builds the embedded one."
)
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_STOP_GRACE_S = 10.0
_POLL_INTERVAL_S = 0.1
_REQUEST_TIMEOUT_S = 5.0

# Apicurio's own defaults are for a server: a pool of 20 to 100 connections. With a
# small pool H2 must not drop the in-memory database when its last connection closes.
_LEAN_SETTINGS: Mapping[str, str] = {
    "quarkus.datasource.jdbc.url": "jdbc:h2:mem:registry_db;DB_CLOSE_DELAY=-1",
    "quarkus.datasource.jdbc.initial-size": "1",
    "quarkus.datasource.jdbc.min-size": "1",
    "quarkus.datasource.jdbc.max-size": "8",
}


def find_registry_app(*, app: Path | None = None) -> Path:
    """The registry app's `quarkus-run.jar`, from `app`, `$STREAMFLOW_REGISTRY_APP` or the tools.

    `app` and the variable may name the jar or its folder; `tools/registry/app` is
    searched upwards from the current directory and from this package.
    """
    explicit = app or (Path(env) if (env := os.environ.get(_APP_ENV)) else None)
    if explicit is not None:
        explicit = explicit.expanduser()
        jar = explicit / _APP_JAR if explicit.is_dir() else explicit
        if not jar.is_file():
            raise DevkitError(f"The schema registry app {jar} does not exist. {_BUILD_HINT}")
        return jar.resolve()
    found = _local.find_upwards(_APP_RELATIVE, marker=_APP_JAR)
    if found is not None:
        return (found / _APP_JAR).resolve()
    raise DevkitError(
        f"No schema registry app found: {_APP_RELATIVE / _APP_JAR} is not above {Path.cwd()} "
        f"or the streamflow package, and ${_APP_ENV} is not set. {_BUILD_HINT}"
    )


class SchemaRegistry(_local.LocalService):
    """Apicurio Registry in a child JVM, serving the Confluent API; see the module docstring."""

    def __init__(
        self,
        *,
        app: Path | None = None,
        work_dir: Path | None = None,
        heap: str = "192m",
        compatibility: str = "BACKWARD",
        keep: bool = False,
        overrides: Mapping[str, str | int] | None = None,
        jvm_options: Sequence[str] = (),
    ) -> None:
        """`compatibility` is the global level; `overrides` are Apicurio/Quarkus settings."""
        self._app = app
        self._given_work_dir = work_dir
        self._heap = heap
        self._compatibility = compatibility
        self._keep = keep
        self._overrides = {key: str(value) for key, value in (overrides or {}).items()}
        self._jvm_options = tuple(jvm_options)
        self._work_dir: Path | None = None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._archive: ClassArchive | None = None
        self._recording: Path | None = None  # the class archive this JVM writes as it exits

    def __repr__(self) -> str:
        where = self.url if self._port else "not started"
        return f"SchemaRegistry({where}, running={self.is_running})"

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>/apis/ccompat/v7`: what a Confluent registry client takes."""
        if self._port is None:
            raise DevkitError("The schema registry has not been started.")
        return f"http://{_HOST}:{self._port}{_API_PATH}"

    @property
    def work_dir(self) -> Path | None:
        """The folder with `registry.log`, once started."""
        return self._work_dir

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the registry on a free port, wait until it answers, and set its compatibility."""
        if self.is_running:
            return
        java = find_java()
        jar = find_registry_app(app=self._app)
        work_dir = self._prepare_work_dir()
        self._port = _local.free_ports()[0]
        # the application's jars, its classes parsed once per machine (see devkit.java)
        self._archive = ClassArchive("registry", java=java, jars=jar.parent.rglob("*.jar"))
        archive_options, self._recording = self._archive.options_recording()
        self._process = self._launch(java=java, jar=jar, work_dir=work_dir, jvm=archive_options)
        _running.add(self)
        try:
            self._wait_until_ready(deadline=time.monotonic() + timeout)
            self._set_compatibility()
        except BaseException:
            self._terminate()
            raise

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL) and remove the work dir unless kept. Idempotent."""
        self._terminate()
        if self._work_dir is not None and self._given_work_dir is None and not self._keep:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None
        self._port = None

    def _prepare_work_dir(self) -> Path:
        if self._work_dir is None:
            if self._given_work_dir is not None:
                self._given_work_dir.mkdir(parents=True, exist_ok=True)
                self._work_dir = self._given_work_dir.resolve()
            else:
                self._work_dir = Path(tempfile.mkdtemp(prefix="streamflow-registry-"))
        return self._work_dir

    def _settings(self, work_dir: Path) -> dict[str, str]:
        assert self._port is not None
        return {
            "quarkus.http.host": _HOST,
            "quarkus.http.port": str(self._port),
            **(
                {"registry.rules.global.compatibility": self._compatibility}
                if self._compatibility != "NONE"
                else {}
            ),
            # Quarkus and Vert.x unpack into the temp dir; keep that inside the work dir.
            "java.io.tmpdir": str(work_dir / "tmp"),
            **_LEAN_SETTINGS,
            **self._overrides,
        }

    def _launch(
        self, *, java: Path, jar: Path, work_dir: Path, jvm: Sequence[str]
    ) -> subprocess.Popen[bytes]:
        (work_dir / "tmp").mkdir(exist_ok=True)
        properties = [f"-D{key}={value}" for key, value in self._settings(work_dir).items()]
        command = [
            str(java),
            f"-Xmx{self._heap}",
            f"-Xms{self._heap}",
            *SERVICE_FLAGS,
            *jvm,
            *properties,
            *self._jvm_options,
            "-jar",
            str(jar),
        ]
        with (work_dir / "registry.log").open("ab") as out:
            return subprocess.Popen(
                command,
                cwd=work_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_until_ready(self, *, deadline: float) -> None:
        while not self._answers():
            if self._process is not None and (code := self._process.poll()) is not None:
                raise DevkitError(
                    f"The schema registry exited with code {code} while starting.{self._tails()}"
                )
            if time.monotonic() >= deadline:
                raise DevkitError(
                    f"The schema registry did not become ready in time.{self._tails()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _answers(self) -> bool:
        try:
            with _opener.open(f"{self.url}/subjects", timeout=_REQUEST_TIMEOUT_S) as reply:
                return int(reply.status) == 200
        except OSError:  # refused, reset, or an HTTP error while it starts
            return False

    def _set_compatibility(self) -> None:
        if self._compatibility == "NONE":
            return  # Apicurio's NONE is the absence of a global rule: nothing to set
        body = json.dumps({"compatibility": self._compatibility}).encode()
        request = urllib.request.Request(
            f"{self.url}/config",
            data=body,
            method="PUT",
            headers={"Content-Type": _CONTENT_TYPE},
        )
        try:
            with _opener.open(request, timeout=_REQUEST_TIMEOUT_S) as reply:
                answer = json.load(reply)
        except (OSError, ValueError) as error:
            raise DevkitError(
                f"The schema registry refused compatibility {self._compatibility!r}: {error}."
                f"{self._tails()}"
            ) from error
        if answer.get("compatibility") != self._compatibility:
            raise DevkitError(f"The schema registry answered {answer} to setting compatibility.")

    def _tails(self) -> str:
        if self._work_dir is None:
            return ""
        text = _local.tail(self._work_dir / "registry.log")
        if "UnsupportedClassVersionError" in text:
            text += "\nThe schema registry needs Java 17 or newer; set JAVA_HOME to a newer JDK."
        return f" Work dir: {self._work_dir}\n{text}" if text else f" Work dir: {self._work_dir}"

    def _terminate(self) -> None:
        process, self._process = self._process, None
        _running.discard(self)
        _local.terminate(process, grace=ClassArchive.stop_grace(_STOP_GRACE_S, self._recording))
        if self._archive is not None and process is not None:
            self._archive.keep(self._recording, process.returncode)
            self._recording = None


# The registry is on 127.0.0.1: a proxy from the environment must never see its requests.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

_running: set[SchemaRegistry] = set()


@atexit.register
def _stop_all() -> None:
    """Stop registries a crashed or careless session left running, so no JVM outlives Python."""
    for registry in list(_running):
        registry.stop()
