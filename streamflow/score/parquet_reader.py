"""Parquet rows, read in a child process whose memory is capped, so one row costs a bound.

A few bytes of Parquet can say a great deal: a run of zeros or of one dictionary
entry compresses to almost nothing, and pyarrow builds what the pages declare.
A 17 KB file held one row that took 1.25 GiB to read. The footer's sizes help
only when the writer was honest: they are its word, not the pages' (a footer
edited to declare 1 value still had 100 million read), and even an honest one
does not count what a dictionary entry becomes when each of its uses is copied
out. pyarrow has no memory bound of its own, so a child process reads the file
(``python -m streamflow.score.parquet_reader``) with its address space capped at
what it needs to start plus :data:`MAX_READ_BYTES`, in batches sized from the
footer to fit well within that:

* a row group whose footer already declares more than the cap for one row is
  refused without being read;
* a batch that needs more than the cap fails its allocation in the child (on
  Linux, where the cap is enforced), and the rest of its row group is refused;
* a child that dies costs the rest of the row group it was in, and a new child
  goes on from the next one.

Each refusal is one problem, at the first row it covers, naming the rows and
why. The child sends each batch in Arrow's IPC stream format (data, never code:
no pickle crosses), once its own ``to_pylist`` of it has fit within the cap, so
the parent's, of the same batch, costs what the child's did.
"""

from __future__ import annotations

import importlib
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["MAX_READ_BYTES", "read", "read_tables"]

#: What reading one batch of rows may take, above what the reader needs to start.
MAX_READ_BYTES = 1 << 30
_MAX_BATCH_ROWS = 8192
_PYTHON_PER_VALUE = 32  # what a value costs once a Python object in a list, about

Row = tuple[int, Any, str]  # (row number, the row as read or None, why it was not read)
Batch = tuple[int, Any, str]  # (first row number, an Arrow table or None, why it was not read)


def read(path: Path, *, budget: int = MAX_READ_BYTES) -> Iterator[Row]:
    """Every row of the file in order: ``(number, row, "")``, or, for rows refused,
    ``(first number, None, why)``. A file pyarrow cannot open raises what it raises."""
    for number, table, why in read_tables(path, budget=budget):
        if table is None:
            yield number, None, why
        else:
            for offset, doc in enumerate(table.to_pylist()):
                yield number + offset, doc, ""


def read_tables(path: Path, *, budget: int = MAX_READ_BYTES) -> Iterator[Batch]:
    """The file in batches, in order: ``(first number, Arrow table, "")``, or, for rows
    refused, ``(first number, None, why)``. A batch's ``to_pylist`` fitted within the cap
    in the child, so the parent's, of the whole batch or of any of its rows, fits too.
    A file pyarrow cannot open raises what it raises."""
    footer = _parquet().ParquetFile(path).metadata
    sizes = [footer.row_group(g).num_rows for g in range(footer.num_row_groups)]
    starts = [0, *itertools.accumulate(sizes)][:-1]
    group = 0
    while group < len(sizes):
        group = yield from _one_reader(path, group, budget, starts, sizes)


def _one_reader(
    path: Path, first: int, budget: int, starts: list[int], sizes: list[int]
) -> Generator[Batch, None, int]:
    """The batches one child sends, from row group ``first`` on; returns where the next
    child starts (past the last group when this one got to the end)."""
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            _child_argv(path, first, budget),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=_child_env(),
        )
        assert child.stdout is not None
        group, number, started, broken = first, starts[first], False, ""
        try:
            for kind, payload in _frames(child.stdout, limit=budget + (1 << 20)):
                if kind == b"G":
                    group, started = int(payload), True
                    number = starts[group]
                elif kind == b"R":
                    try:
                        table = _loads(payload)
                    except Exception as exc:  # not what our reader sends: stop believing it
                        broken = f"a batch it sent could not be read back ({exc})"
                        break
                    yield number, table, ""
                    number += table.num_rows
                elif kind == b"P":
                    refused = json.loads(payload)
                    yield number, None, _not_read(number, refused["rows"], group, refused["why"])
                    number += refused["rows"]
                elif kind == b"E":
                    return len(sizes)
                else:  # a frame longer than any batch within the budget
                    broken = f"it sent more than {_size(budget)} at once"
                    break
        finally:
            if child.poll() is None:
                child.kill()
            code = child.wait()
        why = f"the Parquet reader stopped ({broken or _exit(code) + ': ' + _last_line(errors)})"
    if not started:  # before the first row: the rows are not at fault, and a new child
        for g in range(first, len(sizes)):  # would fail the same way
            if sizes[g]:
                yield starts[g], None, _not_read(starts[g], sizes[g], g, why)
        return len(sizes)
    left = starts[group] + sizes[group] - number
    if left > 0:
        yield number, None, _not_read(number, left, group, why)
    return max(group, first) + 1  # always onwards, whatever a child said


def _not_read(first: int, count: int, group: int, why: str) -> str:
    rows = f"row {first}" if count == 1 else f"rows {first} to {first + count - 1}"
    verb, it = ("is", "it") if count == 1 else ("are", "them")
    return f"{rows} (row group {group}) {verb} not read: {why.replace('{it}', it)}"


def _child_argv(path: Path, first: int, budget: int) -> list[str]:
    return [sys.executable, "-m", __name__, str(path), str(first), str(budget)]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # the system allocator: what pyarrow takes shows in the address space (and so meets
    # the cap) as it is taken, not as arenas reserved ahead
    env.update(ARROW_DEFAULT_MEMORY_POOL="system", MALLOC_ARENA_MAX="2")
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _frames(stream: IO[bytes], *, limit: int) -> Iterator[tuple[bytes, bytes]]:
    """(kind, payload) frames until the stream ends; one longer than ``limit`` ends it,
    as the kind ``b""``."""
    while True:
        header = stream.read(5)
        if len(header) < 5:
            return
        length = int.from_bytes(header[1:], "big")
        if length > limit:
            yield b"", b""
            return
        payload = stream.read(length)
        if len(payload) < length:
            return
        yield header[:1], payload


def _last_line(errors: IO[bytes]) -> str:
    errors.seek(max(0, errors.seek(0, io.SEEK_END) - 2000))
    lines = errors.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else "no message"


def _exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _loads(payload: bytes) -> Any:
    """One batch as an Arrow table, from the IPC stream the child wrote."""
    ipc = importlib.import_module("pyarrow.ipc")
    return ipc.open_stream(payload).read_all()


# -- the child --------------------------------------------------------------------------


def _dumps(table: Any) -> bytes:
    """One batch as an Arrow IPC stream."""
    arrow = importlib.import_module("pyarrow")
    sink = arrow.BufferOutputStream()
    with arrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_batch(table)
    return bytes(sink.getvalue())


def _send(out: IO[bytes], kind: bytes, payload: bytes) -> None:
    out.write(kind + len(payload).to_bytes(4, "big") + payload)
    out.flush()


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")  # the drift extra; only Parquet needs it


def _child(path: Path, first: int, budget: int) -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what a library prints goes to the log, not into the frames
    arrow = importlib.import_module("pyarrow")
    parquet = _parquet().ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    _cap_memory(budget)
    footer = parquet.metadata
    for group in range(first, footer.num_row_groups):
        rows = footer.row_group(group).num_rows
        _send(out, b"G", str(group).encode())
        done = 0
        try:
            declared, values = _declared(footer.row_group(group))
            if rows and declared // rows > budget:
                why = (
                    f"its footer declares {values:,} values for {rows:,} row"
                    f"{'s' if rows != 1 else ''}, more than a batch of rows may take "
                    f"({_size(budget)})"
                )
                _refuse(out, rows, why)
                done = rows
            batch = max(1, min(_MAX_BATCH_ROWS, budget // (4 * max(1, declared // max(1, rows)))))
            batches = () if done else parquet.iter_batches(batch, [group], use_threads=False)
            for table in batches:
                table = table.slice(0, rows - done)  # never more rows than numbered
                # what the parent will build of it, built here first, under the cap
                count = len(table.to_pylist())
                _send(out, b"R", _dumps(table))
                del table
                done += count
        except (MemoryError, arrow.ArrowMemoryError):
            why = f"reading {{it}} takes more memory than a batch of rows may ({_size(budget)})"
            _refuse(out, rows - done, why)
        except Exception as exc:  # ArrowInvalid, OSError, a value no schema reads...
            detail = " ".join(str(exc).split())[:300] or type(exc).__name__
            _refuse(out, rows - done, f"the file is not readable there: {detail}")
    _send(out, b"E", b"")


def _declared(group: Any) -> tuple[int, int]:
    """(what the row group's footer says its values take once read, how many values):
    a value costs its bytes, and a Python object in a list."""
    values = sum(group.column(c).num_values for c in range(group.num_columns))
    stored = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns))
    return stored + _PYTHON_PER_VALUE * values, values


def _refuse(out: IO[bytes], rows: int, why: str) -> None:
    if rows > 0:
        _send(out, b"P", json.dumps({"rows": rows, "why": why}).encode())


def _cap_memory(budget: int) -> None:
    """Cap the address space at what it is now plus ``budget``. Where that cannot be done
    (no ``/proc``, no ``RLIMIT_AS``: not Linux), the footer's word is all there is."""
    try:
        import resource

        status = Path("/proc/self/status").read_text()
        size = 1024 * int(status.split("VmSize:")[1].split()[0])  # kB
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = size + budget if hard == resource.RLIM_INFINITY else min(size + budget, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        pass


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{n:,} bytes"


if __name__ == "__main__":
    _child(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
