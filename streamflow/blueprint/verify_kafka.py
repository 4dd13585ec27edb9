"""The verifier's pass over ``kafka.config``: no credentials in a blueprint.

Whatever ``kafka.config`` holds is copied into the resource's spec, the
ConfigMap, ``describe`` and the local state, so a password there is a
password in all of those. It is refused where it is written, with the place
it belongs instead: the environment of ``run``/``deploy``
(``STREAMFLOW_KAFKA_<KEY>``, which every client the CLI and the replicas make
reads), or on Kubernetes a Secret named by ``kafka.secret``.
"""

from __future__ import annotations

from streamflow.blueprint import kafka_keys
from streamflow.blueprint.report import Reporter
from streamflow.blueprint.yamlload import Node

__all__ = ["check_no_secrets"]


def check_no_secrets(root: Node | None, *, report: Reporter) -> None:
    """A ``secret-in-config`` problem at each credential in ``kafka.config``."""
    kafka = root.get("kafka") if root is not None and root.kind == "map" else None
    config = kafka.get("config") if kafka is not None and kafka.kind == "map" else None
    if config is None or config.kind != "map":
        return
    for text, key, _ in config.fields():
        if kafka_keys.is_secret(text):
            report.error(
                "secret-in-config",
                f"kafka.config.{text} is a credential, and a blueprint is copied into the "
                "application's spec, its ConfigMap and the local state",
                key,
                hint=_hint(text),
            )


def _hint(key: str) -> str:
    prefix = kafka_keys.ENV_PREFIX
    variable = kafka_keys.env_name(key)
    secret_key = variable.removeprefix(prefix)
    return (
        f"remove it; locally, set {variable} in the environment of `streamflow run`/`deploy` "
        f"(any {prefix}* variable becomes a client property); on Kubernetes, put {secret_key} "
        "in a Secret labelled streamflow.io/kafka-credentials=true and name it in kafka.secret"
    )
