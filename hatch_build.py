"""The wheel's build hook: the native codec goes into the wheel, built if it must be.

A wheel made from a checkout carries ``streamflow/_native.abi3.so`` for the checkout's
``native/`` sources: the one ``./dev`` put there when its inputs are unchanged, else one
built now with maturin (``tools/native/build.py`` decides and keeps it in the machine's
build cache). The wheel is then for this platform (its tag says so). An editable
install builds nothing: ``./dev`` puts the module beside the sources, and without it
streamflow decodes with fastavro and says so once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeCodec(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        root = Path(self.root)
        path = root / "tools" / "native" / "build.py"
        spec = importlib.util.spec_from_file_location("_native_build", path)
        assert spec is not None and spec.loader is not None
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        module = build.ensure(root, sys.executable)
        build_data["force_include"][str(module)] = f"streamflow/{module.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
