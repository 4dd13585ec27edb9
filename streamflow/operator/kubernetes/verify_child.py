"""The verifier's child process: one application in on stdin, its problems out on stdout.

``python -m streamflow.operator.kubernetes.verify_child`` reads
``{"application": Application.to_dict()}`` (from ``$STREAMFLOW_VERIFY_REQUEST``
when it is set, as in the verifier's Job, else from stdin) and answers one
JSON document, on one line behind the prefix
:data:`~streamflow.operator.kubernetes.verify.ANSWER_PREFIX`::

    streamflow-verify-answer: {
     "problems": [{"code", "severity", "message", "where", "hint"}, ...],
     "streamlets": {name: {"config": {...}, "http_port": int | null,
                            "control_topic": str | null, "decision_topics": [str]}}}

It runs the very verifier ``streamflow verify`` runs (:func:`verify_text`),
on the application written back as a blueprint, so the operator refuses what
the CLI refuses, for the same reasons and in the same words. The streamlets'
classes are imported here, and only here: each application is verified in a
process of its own, so two applications whose modules share a name never see
each other's (the operator process imports no application code at all). The
``streamlets`` part is what the operator needs of the classes to build the
children (the config with its defaults, the HTTP port of an ingress), so it
never has to import them itself.

A problem's place is a path in the resource (``spec.streamlets.scorer.config``)
rather than a line of the blueprint written here, which nobody sees; a problem
in another file (a schema) keeps its ``file:line:col``. Relative paths in the
spec resolve against the working directory: the application root.

Whatever the application's modules print while they are imported goes to
stderr, so stdout holds the answer alone; in a pod's log the two are one
stream, and the prefix tells the answer from the application's own JSON logs.

In a Job the request travels in an environment variable rather than a
ConfigMap: it is then part of the Job, created and deleted with it, and
immutable like it, with no second object to create first, own and clean up.
One variable holds at most 128 KiB (Linux's limit on one string passed to a
program), so a larger request is gzipped and base64-encoded
(:func:`encode_request`), which a spec's JSON shrinks well under.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from streamflow.blueprint.model import Application
from streamflow.blueprint.problems import Problem
from streamflow.blueprint.verify import verify_text
from streamflow.blueprint.yamlload import Node, parse_yaml
from streamflow.operator.kubernetes import classes, spec, verify
from streamflow.schema import fields

__all__ = [
    "REQUEST_ENV",
    "blueprint_text",
    "decode_request",
    "encode_request",
    "main",
    "verify_application",
]

REQUEST_ENV = "STREAMFLOW_VERIFY_REQUEST"
_PLAIN_MAX = 96 * 1024  # below the kernel's 128 KiB for one variable, with room for its name
_GZIP_PREFIX = "gzip+base64:"
_FILENAME = "<spec>"
# The blueprint's names for the Application's top-level fields (None: not a blueprint's)
_BLUEPRINT = {row.key: row.blueprint for row in fields.table(Application)}


def blueprint_text(application: Mapping[str, Any]) -> str:
    """The application (``Application.to_dict()``) written as the blueprint it came from."""
    data = {
        _BLUEPRINT[key]: value
        for key, value in application.items()
        if _BLUEPRINT.get(key)  # not `source`: where the deploying machine kept it
    }
    return yaml.safe_dump(spec.without_nulls(data), sort_keys=False, allow_unicode=True)


def verify_application(application: Mapping[str, Any], *, root: Path) -> dict[str, Any]:
    """The answer the child writes: located problems, and each streamlet's facts when valid."""
    text = blueprint_text(application)
    result = verify_text(text, filename=_FILENAME, base_dir=root)
    where = _locator(text)
    problems = [_located(problem, where) for problem in result.problems]
    streamlets: dict[str, Any] = {}
    if result.application is not None:
        for name in result.application.streamlets:
            found = classes.facts(result.application, name)
            streamlets[name] = {
                "config": found.config,
                "http_port": found.http_port,
                "control_topic": found.control_topic,
                "decision_topics": list(found.decision_topics),
            }
    return {"problems": problems, "streamlets": streamlets}


def encode_request(application: Mapping[str, Any]) -> str:
    """The request as one environment variable's value: JSON, gzipped when it is large."""
    text = json.dumps({"application": application}, default=str, sort_keys=True)
    if len(text.encode()) <= _PLAIN_MAX:
        return text  # readable in `kubectl get job -o yaml`
    packed = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode("ascii")
    return _GZIP_PREFIX + packed


def decode_request(value: str) -> dict[str, Any]:
    """The request :func:`encode_request` made (or plain JSON); ValueError if unreadable."""
    if value.startswith(_GZIP_PREFIX):
        value = gzip.decompress(base64.b64decode(value[len(_GZIP_PREFIX) :])).decode()
    request = json.loads(value)
    if not isinstance(request, dict):
        raise TypeError("the request is not a JSON object")
    return request


def main() -> int:
    try:
        given = os.environ.get(REQUEST_ENV)
        request = decode_request(given if given is not None else sys.stdin.read())
        application = request["application"]
        if not isinstance(application, Mapping):
            raise TypeError("'application' is not a mapping")
    except (ValueError, KeyError, TypeError, OSError) as exc:
        print(f"verify_child: unreadable request: {exc}", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(sys.stderr):  # what imported modules print is not the answer
        answer = verify_application(application, root=Path.cwd())
    sys.stdout.write(verify.ANSWER_PREFIX + json.dumps(answer, default=str) + "\n")
    return 0


def _located(problem: Problem, where: dict[tuple[int, int], str]) -> dict[str, Any]:
    position = problem.position
    if position.file == _FILENAME:
        place = _nearest(where, position.line, position.column)
    else:
        place = str(position)
    return {
        "code": problem.code,
        "severity": problem.severity.value,
        "message": problem.message,
        "where": place,
        "hint": problem.hint,
    }


def _locator(text: str) -> dict[tuple[int, int], str]:
    """Each node of the written blueprint by position: the spec path it stands for."""
    root, _ = parse_yaml(text, filename=_FILENAME)
    found: dict[tuple[int, int], str] = {}

    def walk(node: Node, path: str, keys: tuple[str, ...]) -> None:
        found.setdefault((node.line, node.column), path)
        if node.kind == "map":
            for key, value in node.entries:
                child = f"{path}.{_spec_field(keys, key.text)}"
                # a block mapping starts where its first key does: the key is the better name
                found[(key.line, key.column)] = child
                walk(value, child, (*keys, key.text))
        elif node.kind == "seq":
            for index, item in enumerate(node.items):
                walk(item, f"{path}[{index}]", (*keys, str(index)))

    if root is not None:
        walk(root, "spec", ())
    return found


def _spec_field(parents: tuple[str, ...], key: str) -> str:
    """A key of the written blueprint as the spec spells it (:func:`.spec.spec_name`)."""
    if not parents:
        key = next((field for field, name in _BLUEPRINT.items() if name == key), key)
    return spec.spec_name(parents, key)


def _nearest(where: dict[tuple[int, int], str], line: int, column: int) -> str:
    """The path of the node at a position, else of the last node that starts before it."""
    before = [pos for pos in where if pos <= (line, column)]
    return where[max(before)] if before else "spec"


if __name__ == "__main__":
    sys.exit(main())
