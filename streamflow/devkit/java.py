"""The Java that runs the devkit's JVMs (Kafka, the schema registry), whether it is new
enough, and the class-data archive that makes their starts cheaper.

Kafka 4 needs Java 17. An older Java fails only once the broker's classes
load, with an ``UnsupportedClassVersionError`` deep in a log; a first
``streamflow run`` would also have downloaded the Kafka jars for nothing. So
the version is asked (``java -version``, once per process and Java) before
either, and a missing or old Java is one sentence that says what to install.

A JVM spends most of its start parsing and verifying the same few thousand
classes. :class:`ClassArchive` keeps them, once parsed, in an application
class-data archive (AppCDS, ``-XX:SharedArchiveFile``) in the user's cache: a
broker then reaches ready with about 40% less CPU (2.3 -> 1.4 CPU s on a 2-core
machine) and in about 1 s less. Java 17 has no ``-XX:+AutoCreateSharedArchive``,
so the first JVM on a machine records one as it exits (``-XX:ArchiveClassesAtExit``)
into a file of its own, which is renamed into place only when the JVM exited by
itself or on SIGTERM (both after writing it); a JVM killed while it writes leaves
nothing behind, and a part that no one renamed is removed after a day. The archive's name
digests the Java and every jar it was made from, so new jars or a new Java make
a new one; an archive Java refuses anyway is skipped by Java (``-Xshare:auto``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from streamflow.devkit._local import DevkitError
from streamflow.devkit.cache import cache_dir

__all__ = [
    "MINIMUM_JAVA",
    "SERVICE_FLAGS",
    "ClassArchive",
    "find_java",
    "java_major",
    "require_java",
]

#: The oldest Java that runs the pinned Kafka (4.x).
MINIMUM_JAVA = 17
#: What the devkit's JVM services (the broker, the registry) run with: a test machine
#: runs several at once on 2 cores, so one GC thread, the quick compiler only (a
#: service lives minutes, not days), no perf-data file, and IPv4 as the clients use.
SERVICE_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
_INSTALL = "e.g. `apt-get install openjdk-17-jre-headless`, or `brew install openjdk@17`"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def find_java() -> Path:
    """The `java` of `$JAVA_HOME`, else the one on PATH."""
    if java_home := os.environ.get("JAVA_HOME"):
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise DevkitError(
                f"JAVA_HOME is {java_home}, but {java} is not an executable. "
                "Point JAVA_HOME at a JDK 17 or newer, or unset it to use the java on PATH."
            )
        return java
    if found := shutil.which("java"):
        return Path(found)
    raise DevkitError(
        f"No `java` on PATH and JAVA_HOME is not set: the embedded Kafka needs Java "
        f"{MINIMUM_JAVA} or newer ({_INSTALL})."
    )


@functools.lru_cache(maxsize=8)
def java_major(java: Path) -> int:
    """The major version of ``java`` (8 for 1.8, 17 for 17.0.15); DevkitError if it says none."""
    try:
        result = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevkitError(f"{java} -version failed ({exc}); is it a working Java?") from None
    found = _VERSION.search(result.stderr + result.stdout)
    if found is None:
        raise DevkitError(f"{java} -version did not say its version; is it a working Java?")
    major, minor = int(found.group(1)), int(found.group(2) or 0)
    return minor if major == 1 else major


def require_java(minimum: int = MINIMUM_JAVA) -> Path:
    """The Java to use, once it is known to be ``minimum`` or newer."""
    java = find_java()
    major = java_major(java)
    if major < minimum:
        raise DevkitError(
            f"{java} is Java {major}, but the embedded Kafka needs Java {minimum} or newer "
            f"({_INSTALL}; or point JAVA_HOME at one)."
        )
    return java


#: How a JVM that recorded an archive may have ended for the archive to be whole: by
#: itself, or by SIGTERM (Java's exit code 143), both after the archive was written.
_WHOLE_EXITS = (0, 128 + 15)
_KEPT_PER_PROGRAM = 3
#: How long a JVM that records its archive may take to stop. Writing the archive costs
#: about 3.7 CPU s (a broker's: 2.5 s of wall time on an idle 2-core machine, against
#: 0.2 s without); on a machine loaded 6 times over that passed a 15 s grace, the JVM
#: was killed, and no archive was left for any later one (seen in a loaded CI run).
RECORDING_STOP_GRACE_S = 90.0


class ClassArchive:
    """The class-data archive of one program (``name``) on one Java and set of jars."""

    def __init__(self, name: str, *, java: Path, jars: Iterable[Path]) -> None:
        digest = hashlib.sha256()
        for path in (Path(java).resolve(), *sorted(jars)):
            with contextlib.suppress(OSError):
                stat = path.stat()
                digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        self.path = cache_dir() / "jvm" / f"{name}-{digest.hexdigest()[:16]}.jsa"

    def options(self) -> list[str]:
        """The JVM options that use the archive, when there is one (else none)."""
        try:
            os.utime(self.path)  # used now: the last to be pruned (see keep)
        except OSError:
            return []
        return [f"-XX:SharedArchiveFile={self.path}"]

    def options_recording(self) -> tuple[list[str], Path | None]:
        """The options for a long-lived JVM: use the archive, or record it when there is
        none yet; and the file being recorded, for :meth:`keep`."""
        if self.path.is_file():
            return self.options(), None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return [], None  # no cache to write to: start as before
        recording = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:12]}.part")
        return [f"-XX:ArchiveClassesAtExit={recording}"], recording

    @staticmethod
    def stop_grace(grace: float, recording: Path | None) -> float:
        """How long a JVM asked to stop within ``grace`` may take: longer while it records
        (it writes the archive as it exits). A kill (no grace) stays a kill."""
        return max(grace, RECORDING_STOP_GRACE_S) if recording is not None and grace > 0 else grace

    def keep(self, recording: Path | None, exit_code: int | None) -> None:
        """After the recording JVM ended: its archive becomes this one's when whole."""
        if recording is None:
            return
        with contextlib.suppress(OSError):
            if exit_code in _WHOLE_EXITS and recording.stat().st_size > 0:
                os.replace(recording, self.path)  # atomic: readers see none or a whole one
            else:
                recording.unlink()
        self._prune()

    def _prune(self) -> None:
        """Keep this program's most recently used archives (other checkouts' jars, older
        Javas), and no more: each is tens of megabytes."""
        name = self.path.name.rsplit("-", 1)[0]
        with contextlib.suppress(OSError):
            found = sorted(
                self.path.parent.glob(f"{name}-*.jsa"),
                key=lambda path: path.stat().st_mtime,
                reverse=True,
            )
            for old in found[_KEPT_PER_PROGRAM:]:
                old.unlink(missing_ok=True)
            # recordings whose JVM or recorder died before keep() (none is written that long)
            day_ago = time.time() - 24 * 3600
            for part in self.path.parent.glob(f"{name}-*.jsa.*.part"):
                if part.stat().st_mtime < day_ago:
                    part.unlink(missing_ok=True)
