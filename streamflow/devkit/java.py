"""The Java that runs the devkit's JVMs (Kafka, the schema registry), and whether it is new enough.

Kafka 4 needs Java 17. An older Java fails only once the broker's classes
load, with an ``UnsupportedClassVersionError`` deep in a log; a first
``streamflow run`` would also have downloaded the Kafka jars for nothing. So
the version is asked (``java -version``, once per process and Java) before
either, and a missing or old Java is one sentence that says what to install.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from streamflow.devkit._local import DevkitError

__all__ = ["MINIMUM_JAVA", "find_java", "java_major", "require_java"]

#: The oldest Java that runs the pinned Kafka (4.x).
MINIMUM_JAVA = 17
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
