"""The streamflow side of every Kafka scenario: a one-streamlet app spec and its command.

Each scenario runs ``streamflow streamlet run`` (what a pod runs) through
:mod:`bench.sf_replica`, against a spec written here: one processor between an input
and an output topic, with the guarantee and the replica count the scenario asks for.
The app name doubles as the consumer group prefix (``<app>.<streamlet>``). Both
topics are in one topic format; a registry format names the registry and lets the
replica register its output schema (``register: auto``), as ``run`` does with the
devkit's registry.

The streamlet runs with ``lineage: false``: the hand-written loop it is measured
against copies no lineage headers, so both do the same work. Reading every input's
headers for ``streamflow score`` costs up to a microsecond a record; the passthrough
measures that too, as its own competitor (``sf-lineage``, the blueprint's default).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import common

STREAMLET = "pass"
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"


def write_spec(
    workdir: Path,
    *,
    name: str,
    input_topic: str,
    output_topic: str,
    class_name: str = "PassBatch",
    guarantee: str = AT_LEAST_ONCE,
    replicas: int = 1,
    topic_format: str = common.AVRO,
    registry: str | None = None,
    lineage: bool = False,
) -> Path:
    """The app spec file for one processor; its consumer group is ``group(name)``."""
    topic = {"partitions": common.PARTITIONS, "format": topic_format}
    spec: dict[str, Any] = {
        "name": name,
        "schema_paths": [str(common.SCHEMA_DIR)],
        "python_paths": [str(common.REPO)],
        "streamlets": {
            STREAMLET: {
                "class": f"bench.streamlets:{class_name}",
                "guarantee": guarantee,
                "replicas": replicas,
                "lineage": lineage,
            }
        },
        "topics": {
            input_topic: {"consumers": [f"{STREAMLET}.in"], **topic},
            output_topic: {"producers": [f"{STREAMLET}.out"], **topic},
        },
    }
    if registry:
        spec["kafka"] = {"schema_registry": registry, "register": "auto"}
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


def group(name: str) -> str:
    return f"{name}.{STREAMLET}"


def command(
    spec: Path, *, bootstrap: str, records: int, batch_size: int = 500, replica: int = 0
) -> list[str]:
    """The child's argv after ``python``: one replica, timed by its batch hook."""
    return [
        *("-m", "bench.sf_replica", "--app-spec", str(spec), "--streamlet", STREAMLET),
        *("--bootstrap", bootstrap, "--records", str(records)),
        *("--batch-size", str(batch_size), "--replica", str(replica)),
    ]
