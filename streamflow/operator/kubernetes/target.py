"""``--target kubernetes``: the CLI's operations on StreamflowApplication resources.

The target never touches a Deployment: every change is a patch of the
resource's spec (``scale`` sets ``spec.streamlets.<s>.replicas``, ``configure``
its ``config``), and the operator in the cluster does the rest. So the CLI,
``kubectl edit`` and a GitOps tool all change an application the same way,
and the operator stays the one writer of its children. Changes are checked
first, with the same functions as the local target's
(:func:`~streamflow.operator.targets.changes.scaled`,
:func:`~streamflow.operator.targets.changes.reconfigured`), so a mistake is reported
before anything is patched. Reading (``status``, ``logs``) combines the
resource's status, written by the operator, with the pods themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import urllib3
from confluent_kafka.admin import AdminClient
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from streamflow.api.descriptor import ClassLoadError, DeclarationError
from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.kubernetes import (
    admission,
    kafka,
    leftovers,
    names,
    pods,
    rollout_entry,
    scaling,
    spec,
)
from streamflow.operator.kubernetes.client import KubeAccess, KubeError, api_message, explain
from streamflow.operator.kubernetes.executor import Cluster

__all__ = ["KubernetesTarget"]

T = TypeVar("T")
_PodsByStreamlet = dict[str, list[Any]]  # `list` is a method name in the class below

_INSTALL_HINT = (
    "install the operator first: `streamflow operator manifests | kubectl apply -f -`, "
    "or see operator/README.md"
)


class KubernetesTarget:
    """Applications as StreamflowApplication resources in one namespace of one cluster."""

    kind = "kubernetes"

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        image: str | None = None,
    ) -> None:
        access = KubeAccess(kubeconfig=kubeconfig, context=context)
        try:
            configuration = access.configuration()
            self.namespace = namespace or access.default_namespace()
        except KubeError as exc:
            raise targets.TargetError(str(exc)) from None
        self.server = str(configuration.host)
        self.image = image
        self.cluster = Cluster(client.ApiClient(configuration))

    # -- changes -----------------------------------------------------------------

    def deploy(self, app: Application, *, bootstrap: str | None) -> targets.Change:
        address = bootstrap or app.kafka.bootstrap
        if not address:
            raise targets.TargetError(
                f"{app.name!r} has no Kafka bootstrap servers for its pods to reach",
                hint="set kafka.bootstrap in the blueprint, or pass --bootstrap-servers",
            )
        if address != app.kafka.bootstrap:
            app = _with_bootstrap(app, address)
        existing = self._get(app.name, missing_ok=True)
        settings = _pod_settings(existing, app, image=self.image)
        body = spec.body(app, namespace=self.namespace, pods=settings)
        previous = None
        if existing is None:
            self._call(lambda: self.cluster.create_app(body))
        else:
            previous = _application(existing)
            patch = [{"op": "replace", "path": "/spec", "value": body["spec"]}]
            self._patch(app.name, patch)
        return _planned(app, previous, [])

    def scale(self, name: str, replicas: Mapping[str, int]) -> targets.Change:
        app = self.application(name)
        scaled = targets.scaled(app, replicas)
        patch = {"spec": {"streamlets": {s: {"replicas": n} for s, n in replicas.items()}}}
        self._patch(name, patch)
        counted = [s for s, n in replicas.items() if n > 0]
        return _planned(scaled, app, targets.idle_replica_warnings(scaled, counted))

    def configure(self, name: str, settings: Mapping[str, Any]) -> targets.Change:
        app = self.application(name)
        configured = _checked(lambda: targets.reconfigured(app, settings))
        changed = {key.partition(".")[0] for key in settings}
        patch = {
            "spec": {
                "streamlets": {
                    s: {"config": dict(configured.streamlets[s].config)} for s in sorted(changed)
                }
            }
        }
        self._patch(name, patch)
        return _planned(configured, app, [])

    def undeploy(self, name: str, *, delete_topics: bool) -> Sequence[str]:
        found = self._get(name)
        app = _application(found)
        resource = str(found["metadata"]["name"])
        self._call(lambda: self.cluster.delete_app(self.namespace, resource))
        return self._delete_topics(found, app) if delete_topics else []

    def remains(self, name: str) -> leftovers.Leftovers:
        """What is left of an undeployed application: ``undeploy`` waits until it is gone."""
        resource = names.resource_name(name)
        return self._call(lambda: leftovers.find(self.cluster, self.namespace, resource))

    # -- reading -----------------------------------------------------------------

    def application(self, name: str) -> Application:
        return _application(self._get(name))

    def configuration(self, name: str) -> dict[str, dict[str, Any]]:
        app = self.application(name)
        return _checked(lambda: targets.effective_config(app))

    def kafka_client_config(self, name: str) -> dict[str, Any]:
        """The librdkafka properties of a Kafka client of ``name``, as the operator admits them.

        ``spec.kafka.config`` merged with its labelled Secret (whose ``BOOTSTRAP``
        is ``bootstrap.servers``), or :class:`~streamflow.operator.targets.TargetError`
        when admission refuses them: a security setting in the spec, a Secret
        that is missing, unlabelled or names no brokers.
        """
        try:
            settings = self._client_settings(self._get(name))
        except admission.RefusedError as exc:
            raise targets.TargetError(
                f"no Kafka client is made for {name!r}: {exc}",
                hint=f"see `streamflow status {name} --target kubernetes`",
            ) from None
        return dict(settings.config)

    def status(self, name: str) -> targets.AppStatus:
        return self._status(self._get(name))

    def list(self) -> Sequence[targets.AppStatus]:
        found = self._call(lambda: self.cluster.list_apps(self.namespace))
        return [self._status(item) for item in found]

    def logs(
        self,
        name: str,
        streamlet: str,
        *,
        follow: bool,
        replica: int | None = None,
        tail: int | None = None,
    ) -> Iterator[targets.LogLine]:
        """A generator, so that a mistake surfaces at the first line, where the CLI expects it."""
        app = self.application(name)
        if streamlet not in app.streamlets:
            raise targets.TargetError(
                f"application {name!r} has no streamlet {streamlet!r}",
                hint=f"its streamlets: {', '.join(app.streamlets)}",
            )
        found = self._pods(names.resource_name(name)).get(streamlet, [])
        chosen = pods.pick(found, replica)
        if not chosen:
            which = f" with replica index {replica}" if replica is not None else ""
            raise targets.TargetError(
                f"{streamlet} of {name!r} has no pods{which}",
                hint=f"see `streamflow status {name} --target kubernetes`",
            )
        yield from self._call(
            lambda: pods.logs(self.cluster.core, self.namespace, chosen, follow=follow, tail=tail)
        )

    # -- internals ---------------------------------------------------------------

    def _call(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except ApiException as exc:
            if exc.status == 404 and not _names_an_object(exc):
                raise targets.TargetError(
                    f"the cluster at {self.server} has no StreamflowApplication resource type",
                    hint=_INSTALL_HINT,
                ) from None
            raise targets.TargetError(str(explain(exc, server=self.server))) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # not even an answer
            raise targets.TargetError(str(explain(exc, server=self.server))) from None

    def _get(self, name: str, *, missing_ok: bool = False) -> Any:
        resource = names.resource_name(name)
        found = self._call(lambda: self.cluster.get_app(self.namespace, resource))
        if found is None and not missing_ok:
            self._missing(name)
        return found

    def _missing(self, name: str) -> NoReturn:
        found = self.list()
        raise targets.TargetError(
            f"no application {name!r} in namespace {self.namespace!r}",
            hint=f"deployed there: {', '.join(s.name for s in found)}"
            if found
            else "deploy one with `streamflow deploy BLUEPRINT --target kubernetes`",
        )

    def _patch(self, name: str, patch: Any) -> None:
        resource = names.resource_name(name)
        self._call(lambda: self.cluster.patch_app(self.namespace, resource, patch))

    def _pods(self, resource: str) -> _PodsByStreamlet:
        return self._call(lambda: pods.by_streamlet(self.cluster.core, self.namespace, resource))

    def _status(self, found: Mapping[str, Any]) -> targets.AppStatus:
        app = _application(found)
        metadata = found.get("metadata") or {}
        recorded = found.get("status") or {}
        generation = int(metadata.get("generation") or 0)
        up_to_date = int(recorded.get("observedGeneration") or -1) == generation
        by_streamlet = self._pods(str(metadata.get("name")))
        streamlets = tuple(
            _streamlet_status(app, s, recorded, by_streamlet.get(s, [])) for s in app.streamlets
        )
        if not recorded:
            phase, message = (
                targets.Phase.PENDING,
                f"no operator has acted on it yet; is `streamflow operator run` watching "
                f"namespace {self.namespace!r}?",
            )
        elif not up_to_date and recorded.get("phase") != targets.Phase.FAILED:
            phase, message = (
                targets.Phase.PENDING,
                "the operator has not applied the latest change yet",
            )
        else:
            phase = targets.Phase.recorded(recorded.get("phase"))
            message = str(recorded.get("message") or "")
        return targets.AppStatus(
            name=app.name,
            target=self.kind,
            phase=phase,
            message=message,
            up_to_date=up_to_date,
            streamlets=streamlets,
            kafka=app.kafka.bootstrap,
        )

    def _client_settings(self, found: Mapping[str, Any]) -> kafka.ClientSettings:
        """Through admission, as the operator's own clients: :class:`admission.RefusedError`."""
        try:
            resource = spec.parse(found)
        except spec.SpecError as exc:
            name = (found.get("metadata") or {}).get("name")
            raise targets.TargetError(
                f"the resource {name!r} is not a valid application: {exc}"
            ) from None
        return admission.client_settings(resource, credentials=self._credentials)

    def _credentials(self, resource: spec.AppResource) -> dict[str, str] | None:
        name = resource.app.kafka.secret
        if not name:
            return None
        found = self._call(lambda: self.cluster.secret(self.namespace, name))
        return kafka.credentials(found, name=name)

    def _delete_topics(self, found: Mapping[str, Any], app: Application) -> Sequence[str]:
        try:
            settings = self._client_settings(found)
        except admission.RefusedError as exc:
            raise targets.TargetError(
                "the application is undeployed, but its topics were not deleted",
                problems=[str(exc)],
            ) from None
        if not settings.bootstrap:
            raise targets.TargetError(
                "the application is undeployed, but its topics were not deleted",
                problems=["spec.kafka.bootstrap is not set, so Kafka cannot be reached"],
            )
        config = {**settings.config, "log_level": 3}
        return targets.delete_managed(
            AdminClient(config),
            app,
            bootstrap=str(config["bootstrap.servers"]),
            failure="the application is undeployed, but some topics could not be deleted",
        )


def _streamlet_status(
    app: Application, streamlet: str, recorded: Mapping[str, Any], found: list[Any]
) -> targets.StreamletStatus:
    """An autoscaled streamlet wants what the operator last decided, not ``spec.replicas``;
    a serving streamlet's model and last decision are its ``status.rollouts`` entry."""
    spec_ = app.streamlets[streamlet]
    model, decision = rollout_entry.shown((recorded.get(rollout_entry.FIELD) or {}).get(streamlet))
    if spec_.autoscale is None:
        status = pods.streamlet_status(streamlet, spec_.replicas, found)
    else:
        counts = (recorded.get("streamlets") or {}).get(streamlet) or {}
        desired = int(counts.get("desired", spec_.replicas))
        entry = scaling.recorded(recorded).get(streamlet)
        autoscale = scaling.autoscale_status(spec_.autoscale, entry, replicas=desired)
        status = pods.streamlet_status(streamlet, desired, found)
        status = dataclasses.replace(status, autoscale=autoscale)
    return dataclasses.replace(status, model=status.model or model, last_decision=decision)


def _names_an_object(exc: ApiException) -> bool:
    """A 404 about one object (it is missing), not about the resource type (no CRD)."""
    return "not found" in api_message(exc) and "could not find the requested" not in str(exc.body)


def _application(found: Mapping[str, Any]) -> Application:
    try:
        return spec.parse(found).app
    except spec.SpecError as exc:
        name = (found.get("metadata") or {}).get("name")
        raise targets.TargetError(
            f"the resource {name!r} is not a valid application: {exc}"
        ) from None


def _checked(call: Callable[[], T]) -> T:
    """Config checks need the streamlets' classes: say so when they cannot be imported here."""
    try:
        return call()
    except (ClassLoadError, DeclarationError) as exc:
        raise targets.TargetError(
            f"cannot check the config here: {exc}",
            hint="the streamlets' classes must be importable where the CLI runs "
            "(run it from the blueprint's project)",
        ) from None


def _with_bootstrap(app: Application, bootstrap: str) -> Application:
    return dataclasses.replace(app, kafka=dataclasses.replace(app.kafka, bootstrap=bootstrap))


def _pod_settings(existing: Any, app: Application, *, image: str | None) -> spec.PodSettings:
    """The pod settings to deploy with: ``--image`` over what the resource had, else defaults."""
    if existing is None:
        return spec.PodSettings(image=image or "")
    try:
        before = spec.parse(existing).pods
    except spec.SpecError:
        before = spec.PodSettings()
    kept = {s: r for s, r in before.streamlet_resources.items() if s in app.streamlets}
    return spec.PodSettings(
        image=image or before.image,
        image_pull_policy=before.image_pull_policy,
        resources=before.resources,
        streamlet_resources=kept,
    )


def _planned(
    app: Application, previous: Application | None, warnings: Sequence[str]
) -> targets.Change:
    """The actions the operator will take, planned on the spec as the API server stores it."""
    return targets.planned(app, previous, warnings, as_applied=_as_stored)


def _as_stored(app: Application) -> Application:
    """JSON numbers come back from the API server as ``6``, not ``6.0``: plan on those."""
    return Application.from_dict(_whole_floats_as_ints(app.to_dict()))


def _whole_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _whole_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_floats_as_ints(v) for v in value]
    return value
