"""The local target's files: capped replica logs, atomic state files, the daemon's locks."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from streamflow.operator.local import locks, logfiles, private, processes, store
from tests.waiting import wait_until


class LogFiles:
    """Replica logs as a replica writes and rotates them (``runtime.logfile.OwnLog`` does
    it to its own file descriptors), for the readers to be tested against."""

    def __init__(self, directory: Path, *, max_bytes: int = logfiles.DEFAULT_MAX_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._files: dict[str, IO[str]] = {}
        self._lock = threading.Lock()

    def write(self, replica: str, line: str) -> None:
        with self._lock:
            try:
                handle = self._open(replica)
                handle.write(line + "\n")
                handle.flush()
                if handle.tell() > self.max_bytes:
                    self._rotate(replica)
            except OSError:
                pass  # the app was removed meanwhile; its lines have nowhere to go

    def close(self, replica: str | None = None) -> None:
        with self._lock:
            names = [replica] if replica is not None else list(self._files)
            for name in names:
                handle = self._files.pop(name, None)
                if handle is not None:
                    handle.close()

    def _open(self, replica: str) -> IO[str]:
        handle = self._files.get(replica)
        if handle is None:
            # not its parent: a removed app stays removed
            self.directory.mkdir(mode=private.DIR_MODE, exist_ok=True)
            handle = private.open_private(self.directory / f"{replica}.log", "a")
            self._files[replica] = handle
        return handle

    def _rotate(self, replica: str) -> None:
        self._files.pop(replica).close()
        current = self.directory / f"{replica}.log"
        current.replace(current.with_name(current.name + ".1"))


def test_a_log_past_its_cap_rotates_and_readers_see_both_files(tmp_path: Path) -> None:
    logs = LogFiles(tmp_path / "logs", max_bytes=100)
    for i in range(30):
        logs.write("scale-0", f"line {i:02d}")  # 8 bytes + newline each
    logs.close()
    current = tmp_path / "logs" / "scale-0.log"
    rotated = tmp_path / "logs" / "scale-0.log.1"
    assert current.stat().st_size <= 100 and rotated.stat().st_size > 100
    everything = logfiles.last_lines(current, None)
    assert everything[-1] == "line 29"
    assert everything == [f"line {i:02d}" for i in range(30 - len(everything), 30)]
    assert logfiles.last_lines(current, 3) == ["line 27", "line 28", "line 29"]
    assert logfiles.last_lines(current, 0) == []


def test_replica_logs_are_found_in_replica_order(tmp_path: Path) -> None:
    for name in ("scale-10", "scale-2", "scale-0", "scaler-1", "scale-x"):
        (tmp_path / f"{name}.log").write_text("x\n")
    assert list(logfiles.replica_logs(tmp_path, "scale")) == ["scale-0", "scale-2", "scale-10"]


def test_follow_reads_new_lines_new_replicas_and_survives_a_rotation(tmp_path: Path) -> None:
    logs = LogFiles(tmp_path, max_bytes=40)
    logs.write("s-0", "old")

    def rotate() -> None:
        for i in range(4):
            logs.write("s-0", f"rotating {i}")  # past the cap: the file rotates

    rounds = iter(
        [
            lambda: logs.write("s-0", "new 1"),
            lambda: logs.write("s-1", "hello from s-1"),
            rotate,
            lambda: None,
        ]
    )

    def wait(interval: float) -> bool:
        step = next(rounds, None)
        if step is None:
            return True
        step()
        return False

    seen = list(
        logfiles.follow(lambda: logfiles.replica_logs(tmp_path, "s"), wait=wait, interval=0)
    )
    assert ("s-0", "old") not in seen  # its past was shown before following
    assert ("s-0", "new 1") in seen and ("s-1", "hello from s-1") in seen
    assert [line for replica, line in seen if line.startswith("rotating")][-1] == "rotating 3"


def test_follow_reads_the_lines_written_before_the_stop(tmp_path: Path) -> None:
    """A replica's last lines ("stopped cleanly") are written just before the follower is
    told to stop: they were lost when the stop came during the wait between two rounds
    (`streamflow run --for` missed them in a clean-clone CI run)."""
    logs = LogFiles(tmp_path)
    logs.write("s-0", "old")

    def stop_after_the_last_line(interval: float) -> bool:
        logs.write("s-0", "stopped cleanly")
        return True

    seen = list(
        logfiles.follow(lambda: logfiles.replica_logs(tmp_path, "s"), wait=stop_after_the_last_line)
    )
    assert seen == [("s-0", "stopped cleanly")]


_WRITES_ITS_LOG = """
import sys, time
with open(sys.argv[sys.argv.index("--log-file") + 1], "a") as log:
    print("first line", file=log, flush=True)
time.sleep(600)
"""


def test_a_replicas_first_lines_are_echoed_however_late_the_follower_first_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`streamflow run` showed none of a replica's lines written before its log follower's
    first round (a thread starved in a loaded CI run): every file that existed by then
    was read from its end, as if its lines were an adopted replica's past."""
    logs = tmp_path / "logs"
    follow = logfiles.follow

    def late_follow(discover: Callable[[], dict[str, Path]], **kwargs: Any) -> Iterator[Any]:
        wait_until(
            lambda: (logs / "s-0.log").exists() and (logs / "s-0.log").stat().st_size > 0,
            what="the replica's first line in its file",
            timeout=30,
        )
        return follow(discover, **kwargs)

    monkeypatch.setattr(processes.logfiles, "follow", late_follow)
    echoed: list[tuple[str, str]] = []
    group = processes.ProcessGroup(
        on_line=lambda replica, line: echoed.append((replica.name, line)),
        log_dir=logs,
        liveness_every=3600,
    )
    try:
        group.add(
            processes.ReplicaProcess(
                streamlet="s",
                replica=0,
                health_port=0,
                command=[sys.executable, "-c", _WRITES_ITS_LOG, "--health-port", "0"],
            )
        )
        wait_until(lambda: ("s-0", "first line") in echoed, what="the first line", timeout=30)
    finally:
        group.stop(timeout=10)


def test_json_is_written_atomically_and_digested_by_content(tmp_path: Path) -> None:
    path = tmp_path / "apps" / "a" / "app.json"
    digest = store.write_json(path, {"b": 1, "a": [1, 2]})
    assert store.read_json(path) == {"b": 1, "a": [1, 2]}
    assert digest == store.digest({"a": [1, 2], "b": 1})
    assert [p.name for p in path.parent.iterdir()] == ["app.json"]  # no temporary left
    assert store.read_json(tmp_path / "missing.json") is None
    with pytest.raises(FileNotFoundError):  # a removed app's folder is not recreated
        store.write_json(tmp_path / "gone" / "status.json", {}, create_dirs=False)
    assert not (tmp_path / "gone").exists()


def test_a_lock_is_held_by_its_process_and_freed_when_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, fcntl; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert locks.is_held(path)
        assert not locks.FileLock(path).acquire(timeout=0.2)
        holder.kill()  # a SIGKILL leaves no stale lock behind
        holder.wait()
        assert not locks.is_held(path)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_waiting_lock_is_taken_once_released(tmp_path: Path) -> None:
    path = tmp_path / "cli.lock"
    first = locks.FileLock(path)
    assert first.acquire(timeout=0)
    second = locks.FileLock(path)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(timeout=10)))
    waiter.start()
    first.release()
    waiter.join(10)
    assert got == [True] and second.held
    second.release()
