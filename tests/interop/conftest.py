"""The Java interop program (tools/interop-java), built once per session.

`./dev setup` builds it already; here the build script is a no-op then, and
builds it on a fresh checkout. A failed build fails the tests with Maven's
output, and never skips them: an interop test that quietly does not run is
worse than none.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "interop-java"
JAR = TOOL / "target" / "streamflow-interop.jar"


@pytest.fixture(scope="session")
def interop_java() -> list[str]:
    """The command line that runs the Java program: append `produce ...` or `consume ...`."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is not on PATH; install a JDK 17+ (./dev setup needs one too)")
    try:
        built = subprocess.run(
            [str(TOOL / "build")], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"tools/interop-java/build took over 10 minutes:\n{timeout.output}")
    if built.returncode != 0:
        pytest.fail(
            f"tools/interop-java/build failed ({built.returncode}):\n{built.stdout}{built.stderr}",
            pytrace=False,
        )
    return [java, "-jar", str(JAR)]
