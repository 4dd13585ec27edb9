# Sourced by the tools' build scripts: a per-machine cache of what they build.
#
# A clean clone has none of the tools' outputs (they live in the checkout, which
# CI clones afresh every time), so each build would redo minutes of linking that
# the machine has already done for the same inputs. The cache keeps one copy per
# tool and input hash, under $STREAMFLOW_BUILD_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/streamflow/builds/TOOL/HASH). A restore hard-links
# the files when the cache and the checkout share a filesystem (instant; the
# build scripts replace files, never write into them), and copies otherwise.
# An entry is complete or absent: it is filled beside its place and renamed in.
#
#   build_cache_restore TOOL HASH DIR   # fill DIR from the cache; 1 if nothing is cached
#   build_cache_store TOOL HASH DIR     # keep DIR's files for the next clone
#
# A Python virtualenv names its own place in its scripts, activators and pyvenv.cfg,
# so a copy made elsewhere is rewritten to name where it is restored:
#
#   build_cache_restore_venv TOOL HASH DIR   # build_cache_restore, then that rewrite
#   build_cache_store_venv TOOL HASH DIR     # build_cache_store, saying where DIR is
#
# The rewrite writes each file anew (the cache, and the checkout that made the copy,
# keep theirs); an installer run in a restored virtualenv must not write into the files
# it keeps (./dev uninstalls streamflow before it installs the checkout's).

build_cache_root() {
  echo "${STREAMFLOW_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamflow/builds}"
}

build_cache_restore() {
  local tool="$1" hash="$2" dir="$3" entry
  entry="$(build_cache_root)/$tool/$hash"
  [[ -f "$entry/.complete" ]] || return 1
  rm -rf "$dir.restoring"
  mkdir -p "$(dirname "$dir")"
  cp -al "$entry" "$dir.restoring" 2>/dev/null || {
    rm -rf "$dir.restoring"
    cp -a "$entry" "$dir.restoring"
  }
  rm -f "$dir.restoring/.complete"
  rm -rf "$dir"
  mv "$dir.restoring" "$dir"
}

build_cache_store() {
  local tool="$1" hash="$2" dir="$3" root partial
  root="$(build_cache_root)/$tool"
  [[ -f "$root/$hash/.complete" ]] && return 0
  mkdir -p "$root" || return 0 # a cache that cannot be written is only a slower next clone
  partial="$(mktemp -d "$root/.partial.XXXXXX")" || return 0
  if cp -al "$dir/." "$partial/" 2>/dev/null || cp -a "$dir/." "$partial/"; then
    touch "$partial/.complete"
    rm -rf "${root:?}/$hash"
    mv "$partial" "$root/$hash" 2>/dev/null || rm -rf "$partial"
  else
    rm -rf "$partial"
  fi
  # older inputs' entries go: one entry per tool is what a machine needs
  find "$root" -mindepth 1 -maxdepth 1 ! -name "$hash" -exec rm -rf {} + 2>/dev/null || true
}

build_cache_store_venv() {
  local dir="$3"
  rm -f "$dir/.made-in" && (cd "$dir" && pwd) >"$dir/.made-in"
  build_cache_store "$@"
}

build_cache_restore_venv() {
  local dir="$3"
  build_cache_restore "$@" || return 1
  "$dir/bin/python" - "$dir" <<'PY'
import os
import pathlib
import sys

venv = pathlib.Path(sys.argv[1]).absolute()
made_in = venv / ".made-in"
old, new = made_in.read_text().strip().encode(), str(venv).encode()
for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
    if path.is_symlink() or not path.is_file():
        continue
    data = path.read_bytes()
    if old == new or b"\0" in data or old not in data:
        continue
    fresh = path.with_name(path.name + ".relocated")
    fresh.write_bytes(data.replace(old, new))
    fresh.chmod(path.stat().st_mode)
    os.replace(fresh, path)
made_in.unlink()
made_in.write_bytes(new + b"\n")
PY
}
