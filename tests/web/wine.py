"""The wine examples, deployed under names of their own, for the web view's browser test.

The examples' topic names are fixed (``wine-features``, ...), and the tests
share one broker, so each test deploys a copy of the blueprint whose
application and topics carry a unique suffix. Everything else is the
example as written: its classes (``python_paths`` points at its directory),
its config, and its models (``models/`` links to the session's trained ones,
so the relative paths in its config hold).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WINE = ROOT / "blueprints" / "wine"


def renamed_copy(blueprint: Path, *, into: Path, models: Path) -> tuple[Path, str, dict[str, str]]:
    """``(copy, app name, {example topic: its name in the copy})`` of a wine blueprint."""
    spec: dict[str, Any] = yaml.safe_load(blueprint.read_text())
    suffix = uuid.uuid4().hex[:8]
    name = f"{spec['name']}-{suffix}"
    topics = {topic: f"{topic}-{suffix}" for topic in spec["topics"]}
    spec["name"] = name
    spec["topics"] = {topics[t]: body for t, body in spec["topics"].items()}
    spec["python_paths"] = [str(WINE)]
    spec["schemas"] = [str(ROOT / "schemas")]
    into.mkdir(parents=True, exist_ok=True)
    (into / "models").symlink_to(models, target_is_directory=True)
    copy = into / blueprint.name
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    return copy, name, topics
