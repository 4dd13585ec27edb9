"""A request body to records, with a bounded cost whatever the body holds.

An HTTP body is written by whoever can reach the port, so turning it into
records must cost at most a known amount of CPU and memory, and every way it
can fail must be the client's error (``400``/``413``), never the server's:

* Python's own limits are the client's errors: nesting past the recursion
  limit (``[[[[...``) raises ``RecursionError`` and an integer of more than
  ``sys.get_int_max_str_digits()`` digits raises ``ValueError``; both are
  answered as malformed JSON.
* ``max_records`` caps a batch *before* any record is converted: 349,000 empty
  objects fit in a megabyte, and converting each costs far more than parsing.
* Problems are listed up to :data:`MAX_PROBLEMS`, then conversion stops: a
  client needs the first reasons, not a reply larger than its request.

:func:`decode` is pure and synchronous on purpose: the ingress runs it in a
worker thread, so a large body never stalls the event loop that answers
everyone else.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from streamflow.schema.codecs import DecodeError
from streamflow.streamlets.io import documents

__all__ = ["MAX_PROBLEMS", "Refusal", "decode"]

MAX_PROBLEMS = 100


@dataclass
class Refusal(Exception):
    """Why a body yields no records: an HTTP status, a stable code and a message for the client."""

    status: int
    code: str
    message: str
    problems: list[dict[str, Any]] | None = None
    truncated: bool = field(default=False)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.problems is not None:
            doc["problems"] = self.problems
        if self.truncated:
            doc["truncated"] = True
        return doc


def decode(
    body: bytes, converter: documents.RecordConverter, *, max_records: int
) -> list[dict[str, Any]]:
    """The records in ``body`` (one JSON object, or an array of them); else :class:`Refusal`."""
    doc = _parse(body)
    if isinstance(doc, dict):
        items, indexed = [doc], False
    elif isinstance(doc, list):
        items, indexed = doc, True
    else:
        message = "expected a JSON object (one record) or an array of objects (a batch)"
        raise _invalid([documents.Problem(message)], truncated=False)
    if len(items) > max_records:
        raise Refusal(
            413,
            "too-many-records",
            f"the batch has {len(items)} records; at most {max_records} are accepted "
            "per request: split it",
        )
    return _convert(items, converter, indexed=indexed)


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _malformed(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise _malformed("the body is nested too deeply to be a record") from None
    except ValueError as exc:  # the int-str conversion limit, and nothing else json raises
        limit = sys.get_int_max_str_digits()
        raise _malformed(f"a number in the body has more than {limit} digits ({exc})") from None


def _convert(
    items: list[Any], converter: documents.RecordConverter, *, indexed: bool
) -> list[dict[str, Any]]:
    values: list[dict[str, Any]] = []
    problems: list[documents.Problem] = []
    for index, item in enumerate(items):
        where = index if indexed else None
        try:
            values.append(converter.convert(item))
        except DecodeError as exc:
            problems += documents.problems_of(exc, index=where)
        except RecursionError:
            problems.append(documents.Problem("nested too deeply to be a record", index=where))
        if len(problems) >= MAX_PROBLEMS:
            # Stop here: the rest could only add problems nobody will read.
            more = len(problems) > MAX_PROBLEMS or index < len(items) - 1
            raise _invalid(problems[:MAX_PROBLEMS], truncated=more)
    if problems:
        raise _invalid(problems, truncated=False)
    return values


def _malformed(message: str) -> Refusal:
    return Refusal(400, "malformed-json", message, problems=[{"message": message}])


def _invalid(problems: list[documents.Problem], *, truncated: bool) -> Refusal:
    listed = f"the first {len(problems)} are listed" if truncated else "all are listed"
    count = f"{len(problems)}+" if truncated else str(len(problems))
    return Refusal(
        400,
        "invalid-records",
        f"{count} problem(s) with the records ({listed}); nothing was accepted",
        problems=[p.to_json() for p in problems],
        truncated=truncated,
    )
