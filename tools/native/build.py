"""The native codec, ``streamflow/_native.abi3.so``: built once a machine for each input set.

The inputs are what ``native/`` builds from (``Cargo.toml``, ``Cargo.lock``,
``build.rs``, ``src/``), the Rust compiler's version and the Python's. When the
checkout already holds the module for the same inputs (``streamflow/_native.inputs``
names them), nothing is done; when the machine's build cache has it (the cache
``tools/lib/build-cache.sh`` keeps, tool ``native``), it is copied from there; only
otherwise is it built, with maturin (about a minute on 2 cores the first time, the
crates' downloads included; cargo's target directory is in the cache too, so after a
change to the sources only this crate is compiled again) and stored.

Used by ``./dev`` (set-up) and by the wheel's build hook (``hatch_build.py``), so a
wheel made from a checkout carries the module ``./dev`` built, and a plain
``pip install .`` builds it.

    python tools/native/build.py            # put the module in place
    python tools/native/build.py --inputs   # print the inputs' hash
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = "_native.abi3.so"
STAMP = "_native.inputs"


def cache_root() -> Path:
    """Where the machine's builds are kept (as ``build_cache_root`` in build-cache.sh)."""
    if explicit := os.environ.get("STREAMFLOW_BUILD_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamflow" / "builds"


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"build.py: {command[0]} is needed to build the native codec ({exc}); install "
            "Rust (https://rustup.rs), or use streamflow without it: it falls back to fastavro"
        ) from None
    return done.stdout.strip()


def inputs(root: Path = ROOT, python: str = sys.executable) -> str:
    """The hash of everything the module is built from."""
    digest = hashlib.sha256()
    native = root / "native"
    files = [native / "Cargo.toml", native / "Cargo.lock", native / "build.rs"]
    files += sorted((native / "src").rglob("*.rs"))
    for path in files:
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    digest.update(_version(["rustc", "-V"]).encode())
    digest.update(_version([python, "-c", "import sys; print(sys.version)"]).encode())
    return digest.hexdigest()[:16]


def ensure(root: Path = ROOT, python: str = sys.executable) -> Path:
    """The module in ``streamflow/``, for the checkout's inputs (see the module docstring)."""
    key = inputs(root, python)
    target, stamp = root / "streamflow" / MODULE, root / "streamflow" / STAMP
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == key:
        return target
    entry = cache_root() / "native" / key
    if not (entry / ".complete").is_file():
        _build(root, python, entry)
    _place(entry / MODULE, target)
    stamp.write_text(key + "\n")
    return target


def _say(text: str) -> None:
    print(f"build.py: {text}", file=sys.stderr, flush=True)


def _build(root: Path, python: str, entry: Path) -> None:
    _say("building the native codec with maturin (about a minute the first time) ...")
    started = time.monotonic()
    env = {**os.environ, "CARGO_TARGET_DIR": str(cache_root() / "native-target")}
    with tempfile.TemporaryDirectory() as tmp:
        command = [python, "-m", "maturin", "build", "--release", "--quiet"]
        command += ["--manifest-path", str(root / "native" / "Cargo.toml")]
        command += ["--interpreter", python, "--out", tmp]
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            sys.stderr.write(done.stdout.decode(errors="replace")[-4000:])
            raise SystemExit(f"build.py: maturin failed (exit {done.returncode})")
        [wheel] = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            [member] = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == MODULE]
            partial = Path(tempfile.mkdtemp(dir=_made(entry.parent), prefix=".partial."))
            (partial / MODULE).write_bytes(archive.read(member))
    (partial / ".complete").touch()
    shutil.rmtree(entry, ignore_errors=True)
    try:
        partial.rename(entry)
    except OSError:  # another build stored the same inputs first: theirs is as good
        shutil.rmtree(partial, ignore_errors=True)
    for old in entry.parent.iterdir():  # one entry a machine needs: older inputs' go
        if old.name != entry.name and not old.name.startswith(".partial."):
            shutil.rmtree(old, ignore_errors=True)
    _say(f"built in {time.monotonic() - started:.0f} s")


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _place(source: Path, target: Path) -> None:
    """A copy, written beside ``target`` and renamed over it: a running interpreter that
    loaded the old module keeps its file (never written into)."""
    fresh = target.with_name(target.name + ".new")
    shutil.copyfile(source, fresh)
    os.replace(fresh, target)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--inputs"]:
        print(inputs())
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    ensure()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
