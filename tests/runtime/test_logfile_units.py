"""A process's own log file: every kind of output lands in it, and it rotates under its cap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROGRAM = """
import logging, os, sys
from pathlib import Path
from streamflow.runtime.logfile import OwnLog

own = OwnLog(Path(sys.argv[1]), max_bytes=4096, every=3600)  # rotated by hand below
own.start()
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
rotations = 0
for i in range(1000):
    kind = i % 3
    if kind == 0:
        print(f"line {i} print", flush=True)
    elif kind == 1:
        logging.info("line %d logging", i)
    else:
        os.write(2, f"line {i} native\\n".encode())
    rotations += own.rotate_if_due()
print(f"rotations {rotations}", flush=True)
"""


def test_print_logging_and_native_writes_land_in_the_file_which_rotates(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "r-0.log"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(log)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == done.stderr == ""  # all of it went to the file
    rotated = log.with_name("r-0.log.1")
    current = log.read_text().splitlines()
    previous = rotated.read_text().splitlines()
    rotations = int(current[-1].split()[1])
    assert rotations >= 2
    assert log.stat().st_size <= 4096 + 100 and rotated.stat().st_size <= 4096 + 100
    # the newest lines, across the two files, are all there and in order
    numbers = [int(line.split()[1]) for line in previous + current[:-1]]
    assert numbers == list(range(numbers[0], 1000))
    assert (log.stat().st_mode & 0o777) == 0o600
