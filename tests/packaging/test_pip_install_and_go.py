"""The user's path, from a wheel: install, `streamflow init`, run, test, outside the checkout.

One test walks it all, because each step needs the one before and the costly
part (a first run with an empty cache) happens once:

1. a wheel built from the checkout is installed into a fresh virtualenv in a
   temporary folder;
2. there, with an empty cache, `streamflow init demo` makes a project, and
   `streamflow verify` passes on it;
3. `streamflow run` fetches the pinned Kafka jars (from a Maven mirror on
   127.0.0.1, seeded with the checkout's own jars: the real download, checksum
   and cache, without the network), starts the broker from the cache and the
   replicas, and the egress logs its first scores; then Ctrl-C;
4. the project's own tests pass.

Throughout, nothing of the run names the checkout's ``tools/``: the broker's
classpath is the cache, and every process runs the installed package.

Why the fresh virtualenv borrows the checkout's third-party packages (a ``.pth``
naming its site-packages) rather than installing them: the suite runs offline
and on 2 cores, and what is under test is streamflow's own wheel, which is
installed for real. A ``.pth`` line only adds a folder to ``sys.path``; the
checkout's editable install (itself a ``.pth`` in that folder) is not processed,
so ``import streamflow`` finds the wheel, as an assertion checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from streamflow import devkit
from streamflow.devkit import kafka_jars
from tests.devkit.maven_mirror import Mirror, kafka_files, serving
from tests.running import CliRun

REPO = Path(__file__).parents[2]


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``command`` to its end (bounded, never expected near the bound); its output."""
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{output}"
    return output


def _fresh_virtualenv(tmp_path: Path) -> Path:
    """A virtualenv with streamflow's wheel installed (and the checkout's third parties)."""
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
         tmp_path, env)  # fmt: skip
    [wheel] = wheels.glob("streamflow-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    _run([*pip, "--python", python, "install", "--no-deps", "--no-index", str(wheel)],
         tmp_path, env)  # fmt: skip
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = _run([python, "-c", where], tmp_path, env).strip()
    Path(purelib, "_checkout_third_parties.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _user_env(venv: Path, tmp_path: Path, *, mirror: str) -> dict[str, str]:
    """A user's environment: the virtualenv on PATH, an empty cache, nothing of the suite's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STREAMFLOW_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        STREAMFLOW_CACHE_DIR=str(tmp_path / "cache"),
        STREAMFLOW_HOME=str(tmp_path / "home"),
        STREAMFLOW_MAVEN_URL=mirror,
    )
    return env


def _processes_under(root: int) -> dict[int, str]:
    """The command lines of ``root`` and every process below it (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    lines = {}
    for pid in tree:
        try:
            lines[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
    return {pid: line.decode(errors="replace") for pid, line in lines.items()}


def test_install_the_wheel_init_a_project_run_it_and_test_it(tmp_path: Path) -> None:
    venv = _fresh_virtualenv(tmp_path)
    python, streamflow = str(venv / "bin" / "python"), venv / "bin" / "streamflow"
    work = tmp_path / "work"
    work.mkdir()
    seed = devkit.find_kafka_lib()  # the checkout's jars, only to serve them
    with serving(Mirror(kafka_files(seed))) as mirror:
        env = _user_env(venv, tmp_path, mirror=mirror.url)
        imported = _run([python, "-c", "import streamflow; print(streamflow.__file__)"], work, env)
        assert Path(imported.strip()).is_relative_to(venv)
        # the wheel carries the native codec, built for this checkout's native/ sources
        where_native = "import streamflow._native as n; print(n.__file__)"
        native = _run([python, "-c", where_native], work, env)
        assert Path(native.strip()).is_relative_to(venv)

        _run([str(streamflow), "init", "demo"], work, env)
        project = work / "demo"
        verified = _run([str(streamflow), "verify"], project, env)
        assert "✓ demo: 3 streamlets, 2 topics, 0 problems" in verified

        log_file = tmp_path / "run.log"
        with CliRun(["run"], env=env, log_file=log_file, cwd=project, program=streamflow) as run:
            run.wait(lambda log: " after 10 scores" in log, what="the first scores", timeout=240)
            running = _processes_under(run.process.pid)
            log = run.interrupt()

    cache = tmp_path / "cache" / "kafka" / kafka_jars.pins().kafka_version
    assert kafka_jars.is_complete(cache)
    assert len(mirror.requests) == len(kafka_jars.pins().jars)  # every jar fetched, once
    assert "fetching Apache Kafka" in log
    brokers = [line for line in running.values() if "kafka.Kafka" in line]
    assert len(brokers) == 1 and f"{cache}/*" in brokers[0]  # the classpath: the cache
    assert not [line for line in running.values() if str(REPO / "tools") in line]
    pythons = [line for line in running.values() if "python" in Path(line.split()[0]).name]
    assert len(pythons) >= 4 and all(line.startswith(str(venv)) for line in pythons)

    tested = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project, env)
    assert "3 passed" in tested
