"""The operator's verification of an application: the CLI's verifier, in a child process.

A StreamflowApplication can reach the cluster without ``streamflow deploy``
(``kubectl apply``, a GitOps tool, ``kubectl edit``), so the operator checks
every spec with the very verifier ``streamflow verify`` runs: schemas and
their compatibility across each topic, ports that exist and are connected,
classes that load, config that parses. An application that does not verify is
``Failed``, with every problem and its place in the resource in the
``Verified`` condition and a Warning event.

**Where the verification runs, and why.** The verifier imports the streamlets'
classes. Imported into the operator's own process, the first application's
``classifier_app`` module would be the one every later application sees, and
the operator would grow with every application's code. So each application is
verified in a child process of its own
(:mod:`~streamflow.operator.kubernetes.verify_child`): the spec goes in on
stdin, the problems and what the operator needs of the classes (each
streamlet's config with its defaults, an ingress's HTTP port) come out as JSON
on stdout. The operator process never imports application code.

**Two places to run it.** ``--verify-in operator`` runs the child beside
the operator, with the operator's Python and file system, the paths of the
spec resolved as :func:`~streamflow.operator.kubernetes.spec.parse` resolves
them (against the application root), in the blueprint's directory as a
replica is: right for an operator run from the project (``streamflow operator
run`` beside the code, as the tests run it). On a cluster the operator's image
holds none of the applications' code, so ``--verify-in job`` (the default)
runs the same child as a short-lived Job from each application's own image
(:mod:`~streamflow.operator.kubernetes.verify_job`, started and read by
:mod:`~streamflow.operator.kubernetes.job_verifier`). Both are an
:class:`AppVerifier`: the reconciler asks for a :class:`Verdict` and gets one
now, or ``pending`` while a Job runs.

**What a refused application keeps.** Nothing is created for an application
that does not verify. One that was running keeps its children as they were,
the last spec that verified, much as a Deployment keeps its old pods through
a rollout that cannot progress: a typo in ``kubectl edit`` never takes a
working application down, and the status says what to fix.

Answers are cached by the hash of the application, so a resync of an unchanged
spec does not spawn a process; a child that crashes or times out is not
cached, and the next reconcile tries again. The child's answer is the last
line of its output that starts with :data:`ANSWER_PREFIX` (:func:`read_answer`):
what an application's module prints or logs (JSON lines too) is never taken for it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from streamflow.blueprint.model import Application
from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.spec import AppResource

__all__ = [
    "ANSWER_PREFIX",
    "CHILD_MODULE",
    "AnswerError",
    "AppVerifier",
    "Verdict",
    "Verifier",
    "describe_problems",
    "read_answer",
]

CHILD_MODULE = "streamflow.operator.kubernetes.verify_child"
ANSWER_PREFIX = "streamflow-verify-answer: "  # marks the child's answer among an app's own logs
_LISTED = 10  # problems named in a status message; the rest are counted


@dataclass(frozen=True)
class Verdict:
    """One application's verification: its problems, or why it could not be verified."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Facts] = field(default_factory=dict)
    error: str | None = None  # the child failed: nothing is known either way
    pending: str | None = None  # the verification is under way (a Job runs): what it waits for

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [p for p in self.problems if p.get("severity") == "error"]

    @property
    def ok(self) -> bool:
        return self.error is None and self.pending is None and not self.errors


class AppVerifier(Protocol):
    """What the reconciler asks: the verdict on one application, or that it is pending."""

    def check(self, resource: AppResource) -> Verdict: ...


class AnswerError(ValueError):
    """The child's output holds no answer that can be read."""


def read_answer(output: str) -> Verdict:
    """The verdict in the child's output: its last line that starts with :data:`ANSWER_PREFIX`.

    :class:`AnswerError` if there is none, or it cannot be read.
    """
    for line in reversed(output.splitlines()):
        if not line.startswith(ANSWER_PREFIX):
            continue
        text = line[len(ANSWER_PREFIX) :].strip()
        try:
            answer = json.loads(text)
            problems = list(answer["problems"])
            facts = {
                name: Facts(
                    config=dict(item["config"]),
                    http_port=item.get("http_port"),
                    control_topic=item.get("control_topic"),
                    decision_topics=tuple(map(str, item.get("decision_topics") or ())),
                )
                for name, item in (answer.get("streamlets") or {}).items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AnswerError(f"the verifier's answer cannot be read: {exc}") from None
        return Verdict(problems=problems, facts=facts)
    raise AnswerError("the verifier wrote no answer")


def verified_part(app: Application) -> dict[str, Any]:
    """The application as the verifier sees it: every replica count at its starting value.

    How many replicas run changes with every ``scale`` and every autoscaler
    step. The only check it takes part in, the autoscale bounds, is made by
    :func:`~streamflow.operator.kubernetes.spec.parse` too, so the count stays
    out of the request and its hash: a scale never waits for a verifier, and
    never starts a Job.
    """
    data = app.to_dict()
    for streamlet in data.get("streamlets", {}).values():
        auto = streamlet.get("autoscale")
        streamlet["replicas"] = auto["min"] if auto else 1
    return data


def describe_problems(problems: Sequence[Mapping[str, Any]]) -> str:
    """``spec.streamlets.scorer.config.threshold: invalid float ... [code]; ...``."""
    parts = [f"{p.get('where')}: {p.get('message')} [{p.get('code')}]" for p in problems[:_LISTED]]
    if len(problems) > _LISTED:
        parts.append(f"and {len(problems) - _LISTED} more")
    return "; ".join(parts)


class Verifier:
    """Verifies applications in child processes here (``--verify-in operator``); cached by hash."""

    def __init__(
        self,
        *,
        root: str | Path | None = None,
        timeout_s: float = 60.0,
        python: str = sys.executable,
        cache_size: int = 256,
    ) -> None:
        """``root``: where relative paths of a spec resolve (default: the working directory)."""
        self.root = Path(root) if root is not None else None
        self.timeout_s = timeout_s
        self.python = python
        self.spawned = 0  # child processes started, for tests and metrics
        self._cache: collections.OrderedDict[str, Verdict] = collections.OrderedDict()
        self._cache_size = cache_size
        self._guard = threading.Lock()

    def check(self, resource: AppResource) -> Verdict:
        return self.verify(resource.app)

    def verify(self, app: Application) -> Verdict:
        data = verified_part(app)
        key = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
        with self._guard:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        verdict = self._run(data)
        if verdict.error is None:
            with self._guard:
                self._cache[key] = verdict
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return verdict

    def _working_dir(self, data: Mapping[str, Any]) -> Path | None:
        """``root``, else the blueprint's directory (as a replica's), else the operator's."""
        if self.root is not None:
            return self.root
        source = Path(str(data.get("source") or ""))
        return source.parent if source.is_absolute() and source.parent.is_dir() else None

    def _run(self, data: Mapping[str, Any]) -> Verdict:
        request = json.dumps({"application": data}, default=str)
        with self._guard:
            self.spawned += 1
        try:
            done = subprocess.run(
                # -P: the working directory is not put first on the path, where it would
                # shadow the application's own python_paths (they come in their order)
                [self.python, "-P", "-m", CHILD_MODULE],
                input=request,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                cwd=self._working_dir(data),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Verdict(error=f"the verifier did not finish within {self.timeout_s:.0f}s")
        except OSError as exc:
            return Verdict(error=f"the verifier could not be started: {exc}")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return Verdict(error=f"the verifier failed (exit {done.returncode}): {last}")
        try:
            return read_answer(done.stdout)
        except AnswerError as exc:
            return Verdict(error=str(exc))
