"""Deleting an application's topics on ``undeploy --delete-topics``, for every backend.

Only the topics the application manages are deleted (not those it merely
reads or writes that someone else created). A topic already gone is not a
problem: a second ``undeploy`` or a topic deleted by hand ends the same way.
Each other failure is collected, so the user sees every topic that is left.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException

from streamflow.blueprint.model import Application
from streamflow.operator.targets.protocol import TargetError
from streamflow.runtime.topics import all_topics

__all__ = ["delete_managed"]

_TIMEOUT_S = 30


def delete_managed(
    admin: Any,
    app: Application,
    *,
    bootstrap: str,
    failure: str = "some topics could not be deleted",
) -> list[str]:
    """Delete ``app``'s managed topics with ``admin``; the ones deleted, else TargetError.

    ``failure`` is the error's message when some could not be deleted (the
    backend says what state the application is left in).
    """
    # with the state's changelogs, which the stateful streamlets' replicas made; one
    # that was never made is not there to delete, and that is no problem
    names = [t.name for t in all_topics(app) if t.managed] + app.changelog_topics()
    deleted, problems = [], []
    for topic, future in admin.delete_topics(names, operation_timeout=_TIMEOUT_S).items():
        try:
            future.result(timeout=_TIMEOUT_S)
            deleted.append(topic)
        except TimeoutError:
            problems.append(f"{topic}: Kafka at {bootstrap} did not answer")
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != error.UNKNOWN_TOPIC_OR_PART:
                problems.append(f"{topic}: {error.str()}")
    if problems:
        raise TargetError(failure, problems=problems)
    return deleted
