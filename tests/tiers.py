"""Tiers and parallel groups, set in one place from what each test uses.

Tiers (`-m unit`, `-m integration`, `-m e2e`, `-m chaos`) come from the fixtures
a test asks for, directly or through other fixtures, and from the few modules
that start real processes themselves (`STARTS_SERVICES`): no test file marks
itself. A test is

- `chaos` when it injects faults into a broker, a proxy or a replica of its own;
- `e2e` when it needs the real node, the image store, or runs an example as a
  user does (`./dev run`-style CLI runs of the shipped blueprints);
- `integration` when it talks to any other real service (Kafka, the registry,
  the model server, the control plane, a JVM, a trained TensorFlow model);
- `unit` otherwise: pure Python, in-memory, seconds for the whole tier.

Parallel groups (pytest-xdist, `-n N --dist loadscope`, with the scheduler made
here): every test is in the group of its module, so a module's tests run in order
on one worker and its module-scoped fixtures are made once. The modules that need
what a host has only one of (the real node, buildah's image store) share the
group `host`, so they never run at the same time; the modules that use the
control plane share the group `kube`, so one worker starts one and stops it
when the group is done. Groups are handed out longest
first, from the measured seconds in `tests/durations.json` (written by
`tests/timing.py`), so the long ones do not start last and hold up the end of
the run. The group is a function of the test's id alone, because the controller
that hands out the work collects nothing (and pytest 9.2 no longer lets xdist's
own `loadgroup` rename a test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests import builds

TIERS = ("unit", "integration", "e2e", "chaos")
HOST_GROUP = "host"
DURATIONS = Path(__file__).parent / "durations.json"
_UNKNOWN_GROUP_S = 10.0  # a new module's guess until durations.json is regenerated

# What marks a tier: the fixtures that are, or start, the real thing.
_CHAOS_FIXTURES = frozenset({"proxied_kafka", "kafka_broker", "toxiproxy_server", "chaos_table"})
_HOST_FIXTURES = frozenset({"real_node", "wine_images", "wine_models_in_place"})
_SERVICE_FIXTURES = frozenset(
    {
        "kafka_bootstrap",
        "schema_registry_url",
        "secured_kafka",
        "model_server",
        "model_server_factory",
        "shared_model_server",
        "hosted_models",
        "kube_cluster",
        "interop_java",
        "wine_models",
        "digits_models",
        "reviews_model",
    }
)
# Modules that start real processes without a fixture (a CLI run with its own
# embedded broker, a JVM, buildah), as paths under tests/, with their tier.
STARTS_SERVICES: dict[str, str] = {
    "chaos/": "chaos",
    "e2e/": "e2e",
    "images/": "e2e",
    "examples/": "e2e",
    "packaging/": "e2e",  # a wheel installed and run as a user does, its own broker
    "devkit/test_k8s_real_node.py": "e2e",
    "devkit/test_k8s_cluster.py": "integration",
    "devkit/test_kafka_broker.py": "integration",
    "devkit/test_class_archive.py": "integration",
    "devkit/test_registry.py": "integration",
    "devkit/test_modelserver.py": "integration",
    "devkit/test_toxiproxy.py": "integration",
    "cli/test_run_tail.py": "integration",
    "cli/test_deploy_cmds.py": "integration",
    "operator/test_monitoring.py": "integration",  # promtool, a Go program
    "streamlets/io/test_io_http_hostile.py": "integration",  # real sockets held to deadlines
}
# Modules that use the host's one-of-a-kind resources without a fixture saying so.
_HOST_MODULES = ("images/", "e2e/", "devkit/test_k8s_real_node.py")
# The modules whose tests use the kwok control plane, one group: one worker starts
# one control plane for them, and stops it when the group is done (k8s_fixtures),
# instead of each worker keeping one up to the end (2.2 CPU s a minute each, idle).
KUBE_GROUP = "kube"
_KUBE_FIXTURES = frozenset({"kube_cluster"})
_KUBE_MODULES = ("operator/k8s/", "devkit/test_k8s_cluster.py", "security/test_secured_operator.py")


def register(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: pure Python, no real service (seconds in all)")
    config.addinivalue_line("markers", "integration: talks to a real service (Kafka, k8s, ...)")
    config.addinivalue_line("markers", "e2e: the real node, images, or an example run as a user")
    config.addinivalue_line("markers", "chaos: faults injected into brokers, proxies, replicas")


def tier_of(relative: str, fixtures: set[str]) -> str:
    """The tier of a test in module `relative` (path under tests/) that uses `fixtures`."""
    for prefix, tier in STARTS_SERVICES.items():
        if relative.startswith(prefix):
            return tier
    if fixtures & _CHAOS_FIXTURES:
        return "chaos"
    if fixtures & _HOST_FIXTURES:
        return "e2e"
    if fixtures & _SERVICE_FIXTURES:
        return "integration"
    return "unit"


def group_of(relative: str) -> str:
    """The parallel group of the tests of module `relative` (its path under tests/)."""
    if relative.startswith(_HOST_MODULES):
        return HOST_GROUP
    return KUBE_GROUP if relative.startswith(_KUBE_MODULES) else relative


class GroupScheduling(LoadScopeScheduling):
    """xdist's scheduling by scope, with this module's groups as the scopes."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return group_of(path.removeprefix("tests/"))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> GroupScheduling | None:
    return GroupScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


def _measured() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("groups", {}).items()}


def apply(items: list[pytest.Item], root: Path) -> None:
    """Mark each item with its tier and group, and order the groups longest first."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        path = item.path
        relative = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        fixtures = set(getattr(item, "fixturenames", ()))
        if not any(item.get_closest_marker(name) for name in TIERS):
            item.add_marker(getattr(pytest.mark, tier_of(relative, fixtures)))
        if fixtures & _HOST_FIXTURES and group_of(relative) != HOST_GROUP:
            raise pytest.UsageError(
                f"{relative} uses {sorted(fixtures & _HOST_FIXTURES)}: add it to "
                "_HOST_MODULES in tests/tiers.py, so it never runs beside the host group"
            )
        if fixtures & _KUBE_FIXTURES and group_of(relative) != KUBE_GROUP:
            raise pytest.UsageError(
                f"{relative} uses the control plane: add it to _KUBE_MODULES in "
                "tests/tiers.py, so its tests share the kube group's one control plane"
            )
        group = group_of(relative)
        item.user_properties.append(("group", group))
        item.stash[builds.TOOLS] = builds.needed(relative, fixtures)
        groups.setdefault(group, []).append(item)
    seconds = _measured()
    ordered = sorted(groups, key=lambda g: (-seconds.get(g, _UNKNOWN_GROUP_S), g))
    items[:] = [item for group in ordered for item in _built_last(groups[group])]


def _built_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """A group's modules that need nothing still building first, each module kept whole
    and in order: the host group builds images while the control plane compiles."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    ordered = sorted(modules.values(), key=lambda m: any(i.stash[builds.TOOLS] for i in m))
    return [item for module in ordered for item in module]
