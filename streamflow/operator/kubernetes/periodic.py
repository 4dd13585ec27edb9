"""The operator's periodic work, the resync and the autoscaler's ticks, without kopf's timers.

kopf's timers and daemons always put kopf's finalizer on the resources they
run for, so that kopf can stop them before the object goes. That finalizer
would make every application's deletion wait for the operator: with the
operator down, ``kubectl delete`` hangs, the Deployments keep running, and
uninstalling the operator first strands every application in Terminating.
The operator has nothing to do when an application goes (its children are
garbage-collected through their ownerReferences), so it must not hold one up.

So the periodic work runs here instead, on threads of the operator's own:
:class:`Known` is the set of applications kopf's watch has shown (kept by an
event handler, which needs no finalizer), and each :class:`Periodic` wakes
every ``every_s`` and runs its action on each application it applies to. An
action that fails is logged; the next round tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Known", "Periodic"]

_LOG = logging.getLogger("streamflow.operator")

Key = tuple[str, str]  # namespace, resource name


class Known:
    """The applications the operator watches, each with its last seen spec."""

    def __init__(self) -> None:
        self._specs: dict[Key, Mapping[str, Any]] = {}
        self._guard = threading.Lock()

    def seen(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        with self._guard:
            self._specs[(namespace, name)] = dict(spec)

    def gone(self, namespace: str, name: str) -> None:
        with self._guard:
            self._specs.pop((namespace, name), None)

    def matching(self, wanted: Callable[[Mapping[str, Any]], bool]) -> list[Key]:
        with self._guard:
            return sorted(key for key, spec in self._specs.items() if wanted(spec))


class Periodic:
    """Every ``every_s``, ``action(namespace, name)`` on each known application that ``wants``."""

    def __init__(
        self,
        known: Known,
        *,
        every_s: float,
        action: Callable[[str, str], Any],
        wants: Callable[[Mapping[str, Any]], bool] = lambda _: True,
        name: str,
    ) -> None:
        self.known = known
        self.every_s = every_s
        self.action = action
        self.wants = wants
        self.name = name

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: a round, then a wait of ``every_s`` (cut short by ``stop``)."""
        while not stop.wait(self.every_s):
            for namespace, name in self.known.matching(self.wants):
                if stop.is_set():
                    return
                try:
                    self.action(namespace, name)
                except Exception as exc:  # one application's failure must not end the rounds
                    _LOG.warning("%s of %s/%s: %s", self.name, namespace, name, exc)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), name=f"streamflow-{self.name}", daemon=True
        )
        thread.start()
        return thread
