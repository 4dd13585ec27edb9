"""The verdict that survives a restart: ``status.verified``, what passed and what it gave. Pure.

The verifiers cache their answers in memory only, so without a record an
operator restart would verify every application again: each would go
``Pending`` (``Verifying``) while its pods run on, and ``Failed`` on a
transient error (an image registry that is down for a minute). So when a spec
passes, the reconciler records its key
(:func:`~streamflow.operator.kubernetes.verify_job.spec_key`: the application,
its image, pull policy and working directory) with what the verifier learnt
(each streamlet's config with its defaults, an ingress's HTTP port, the
warnings) in ``status.verified``; a spec whose key is the recorded one is
verified from the record, without a child or a Job.

An image pulled ``Always`` is a tag that can move: its new content is not
verified again until the spec changes (a new tag, a digest, any edit). Pin
images by digest to have every image that runs verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamflow.operator.kubernetes.classes import Facts
from streamflow.operator.kubernetes.verify import Verdict

__all__ = ["FIELD", "passed_before", "record", "restore"]

FIELD = "verified"
#: What a record's facts hold: 2 added the serving streamlets' rollout topics, so a record
#: of an earlier operator is verified again once, to learn them.
FACTS = 2


def record(key: str, verdict: Verdict) -> dict[str, Any]:
    """``status.verified`` for a verdict that passed."""
    return {
        "key": key,
        "facts": FACTS,
        "problems": list(verdict.problems),
        "streamlets": {
            name: {
                "config": dict(facts.config),
                "httpPort": facts.http_port,
                **({"controlTopic": facts.control_topic} if facts.control_topic else {}),
                **(
                    {"decisionTopics": list(facts.decision_topics)} if facts.decision_topics else {}
                ),
            }
            for name, facts in verdict.facts.items()
        },
    }


def restore(previous: Mapping[str, Any] | None, key: str) -> Verdict | None:
    """The recorded verdict, if ``key`` is the key that passed; None if it must be verified."""
    recorded = (previous or {}).get(FIELD)
    if not isinstance(recorded, Mapping) or recorded.get("key") != key:
        return None
    if recorded.get("facts") != FACTS:
        return None  # an earlier operator's: verified again, to learn what it lacks
    try:
        facts = {
            str(name): Facts(
                config=dict(item["config"]),
                http_port=item.get("httpPort"),
                control_topic=item.get("controlTopic"),
                decision_topics=tuple(map(str, item.get("decisionTopics") or ())),
            )
            for name, item in (recorded.get("streamlets") or {}).items()
        }
        return Verdict(problems=list(recorded.get("problems") or []), facts=facts)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a record written by hand or by another version: verify again


def passed_before(previous: Mapping[str, Any] | None, generation: int) -> bool:
    """Whether this generation of the spec verified and was applied (before any record).

    An operator that has no record of it (one of an earlier version wrote the
    status) verifies it again, and until the verifier answers the status stays.
    """
    previous = previous or {}
    if previous.get("observedGeneration") != generation:
        return False
    conditions = previous.get("conditions") or []
    return any(c.get("type") == "Verified" and c.get("status") == "True" for c in conditions)
