"""A StreamflowApplication's spec, to and from the Application model.

The spec is :meth:`Application.to_dict` (so nothing re-parses a blueprint) plus
the fields only a cluster needs: the container image, its pull policy and
the pods' resources. Those stay out of the Application, which knows nothing
of Kubernetes; :class:`PodSettings` carries them instead. ``None`` values are
dropped on the way in, since the API server prunes nulls anyway and a spec
that reads back the same as it was written keeps ``kubectl diff`` quiet.

Two conversions happen here and nowhere else:

* **Names.** The spec follows the Kubernetes API conventions (``pythonPaths``,
  ``imagePullPolicy``, ``autoscale.targetLag``: every multi-word field in
  camelCase), while the blueprint and the Application stay snake_case. The
  Application's field table (:mod:`streamflow.schema.fields`) knows which keys
  are fields: only those are renamed, while a streamlet's ``config`` and the
  Kafka and topic ``config`` maps are data, and keep their keys as written.
* **Paths.** A spec never names a path of the machine that deployed it. The
  image owns an *application root* (:data:`APP_ROOT`, ``/app``) holding the
  project (the nearest directory above the blueprint with ``pyproject.toml``
  or ``.git``); the spec records the blueprint's directory relative to that
  root (``blueprintDir: blueprints/wine``), and ``source``, ``pythonPaths`` and
  ``schemaPaths`` relative to the blueprint's directory, the one rule every
  relative path follows (a streamlet's ``models/wine-v1.keras`` included),
  since a replica's working directory is its blueprint's directory on every
  target. A path outside the project cannot be in the image, so deploying
  it is a :class:`PathError`. Reading a spec resolves its paths against a
  root (:func:`app_root`): ``$STREAMFLOW_APP_ROOT``, else whichever of
  ``/app`` and the project around the working directory holds the blueprint's
  directory, so the operator in its image and the CLI in a checkout both
  find the classes and schemas.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from streamflow.blueprint.model import Application
from streamflow.blueprint.paths import find_project_root
from streamflow.operator.kubernetes import names
from streamflow.schema import fields
from streamflow.schema.fields import camel_case, snake_case

__all__ = [
    "APP_ROOT",
    "DEFAULT_RESOURCES",
    "DEPLOY_TIME",
    "ROOT_ENV",
    "SERVING_RESOURCES",
    "AppResource",
    "Layout",
    "PathError",
    "PodSettings",
    "SpecError",
    "app_root",
    "body",
    "camel_case",
    "parse",
    "parse_live",
    "pod_app_spec",
    "snake_case",
    "spec_name",
    "to_spec",
    "without_nulls",
]

APP_ROOT = "/app"
ROOT_ENV = "STREAMFLOW_APP_ROOT"
DEFAULT_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
# A streamlet that follows a model (it has a control inlet) holds TensorFlow and the
# model in memory: the wine classifier measured 672 MiB resident after loading its model.
SERVING_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "250m", "memory": "768Mi"},
    "limits": {"memory": "1Gi"},
}

# The spec's fields that are not the Application's: where and how its pods run.
DEPLOY_TIME = ("image", "imagePullPolicy", "resources", "blueprintDir")


class SpecError(ValueError):
    """A resource whose spec cannot be turned into an application."""


class PathError(SpecError):
    """An application whose files cannot be named relative to its project."""


@dataclass(frozen=True)
class Layout:
    """Where an application's files are: relative to the root, then to the blueprint's directory."""

    blueprint_dir: str = "."
    source: str = ""
    python_paths: tuple[str, ...] = ()
    schema_paths: tuple[str, ...] = ()

    def working_dir(self, root: str = APP_ROOT) -> str:
        """The blueprint's directory inside the image: the replicas' working directory."""
        return posixpath.normpath(posixpath.join(root, self.blueprint_dir))

    @classmethod
    def of(cls, app: Application) -> Layout:
        """The layout of an application read from a blueprint on this machine.

        :class:`PathError` for a blueprint in no project, or a path outside its project.
        """
        if not app.source:  # built in code, not read from a file: its paths must be relative
            for path in (*app.python_paths, *app.schema_paths):
                if Path(path).is_absolute():
                    raise PathError(
                        f"{path} is absolute, and the application was not read from a "
                        "blueprint file to make it relative to"
                    )
            return cls(".", "", tuple(app.python_paths), tuple(app.schema_paths))
        source = Path(app.source)
        root = find_project_root(start=source.parent)
        if root is None:
            raise PathError(
                f"{source.parent} is in no project (no pyproject.toml or .git in it or above "
                "it), so its files cannot be named from the root of an image; add a "
                "pyproject.toml to the project's root directory"
            )
        blueprint_dir = source.parent.resolve()

        def relative(path: str, what: str) -> str:
            resolved = Path(path).resolve()
            if not resolved.is_relative_to(root):
                raise PathError(
                    f"{what} {path} is outside the project {root}; the image holds only the "
                    "project (at its application root), so every file the application "
                    "uses must be inside it"
                )
            return Path(os.path.relpath(resolved, blueprint_dir)).as_posix()

        return cls(
            blueprint_dir=blueprint_dir.relative_to(root).as_posix() or ".",
            source=source.name,
            python_paths=tuple(relative(p, "the Python path") for p in app.python_paths),
            schema_paths=tuple(relative(p, "the schema path") for p in app.schema_paths),
        )

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Layout:
        """The layout a spec records; :class:`SpecError` for a path that leaves the root."""
        blueprint_dir = str(spec.get("blueprintDir") or ".")
        _check_inside(blueprint_dir, base=".", what="spec.blueprintDir")
        layout = cls(
            blueprint_dir=posixpath.normpath(blueprint_dir),
            source=str(spec.get("source") or ""),
            python_paths=tuple(str(p) for p in spec.get("pythonPaths") or ()),
            schema_paths=tuple(str(p) for p in spec.get("schemaPaths") or ()),
        )
        _check_inside(layout.source or ".", base=layout.blueprint_dir, what="spec.source")
        for key, paths in (
            ("pythonPaths", layout.python_paths),
            ("schemaPaths", layout.schema_paths),
        ):
            for index, path in enumerate(paths):
                _check_inside(path, base=layout.blueprint_dir, what=f"spec.{key}[{index}]")
        return layout

    def to_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"blueprintDir": self.blueprint_dir}
        if self.source:
            out["source"] = self.source
        out["pythonPaths"] = list(self.python_paths)
        out["schemaPaths"] = list(self.schema_paths)
        return out


def _check_inside(path: str, *, base: str, what: str) -> None:
    """Relative, and inside the root once joined to ``base`` (itself relative to the root)."""
    if PurePosixPath(path).is_absolute() or Path(path).is_absolute():
        raise SpecError(
            f"{what} ({path}) is absolute: a spec names paths relative to the application's "
            "root in its image (see `streamflow deploy --dry-run`)"
        )
    joined = posixpath.normpath(posixpath.join(base, path))
    if joined == ".." or joined.startswith("../"):
        raise SpecError(f"{what} ({path}) leaves the application's root")


def app_root(layout: Layout) -> Path:
    """The root a spec's paths are resolved against, here: see the module's docstring."""
    chosen = os.environ.get(ROOT_ENV)
    if chosen:
        return Path(chosen)
    candidates = [Path(APP_ROOT), find_project_root(start=Path.cwd())]
    for candidate in candidates:
        if candidate is not None and (candidate / layout.blueprint_dir).is_dir():
            return candidate
    return Path(APP_ROOT)


@dataclass(frozen=True)
class PodSettings:
    """What a cluster needs to run the application's pods, beyond the Application itself.

    ``image`` has no default: an unqualified ``streamflow:<version>`` would be
    pulled from whatever registry the nodes default to, and hold none of the
    application's classes. ``streamflow deploy --target kubernetes`` requires
    ``--image`` for a new application, and the CRD requires ``spec.image``.
    """

    image: str = ""
    image_pull_policy: str = "IfNotPresent"
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    streamlet_resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def resources_of(self, streamlet: str) -> dict[str, Any]:
        """The streamlet's own requests and limits over the application's defaults."""
        own = self.streamlet_resources.get(streamlet, {})
        return {
            kind: {**dict(self.resources.get(kind) or {}), **dict(own.get(kind) or {})}
            for kind in ("requests", "limits")
            if self.resources.get(kind) or own.get(kind)
        }

    def to_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image} if self.image else {}
        out["imagePullPolicy"] = self.image_pull_policy
        out["resources"] = {k: dict(v) for k, v in self.resources.items()}
        return out


@dataclass(frozen=True)
class AppResource:
    """One StreamflowApplication as the operator reads it.

    ``app`` has its paths resolved against :func:`app_root`; ``layout`` keeps
    them as the spec wrote them, for the pods. ``secret_digest`` is a digest of
    the data of the Kafka Secret, when the operator has read it: it goes into
    the pods' checksum, so that rotating the credentials rolls the pods.
    """

    name: str
    namespace: str
    uid: str
    generation: int
    app: Application
    pods: PodSettings
    layout: Layout = field(default_factory=Layout)
    secret_digest: str = ""

    def owner_reference(self) -> dict[str, Any]:
        """What makes a child garbage-collected with this resource."""
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def parse_live(body: Mapping[str, Any] | None) -> AppResource | None:
    """The resource of a body that is there and not being deleted, or None; None too when
    it is invalid (the reconcile reports that): what the periodic work acts on."""
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    try:
        return parse(body)
    except SpecError:
        return None


def parse(resource: Mapping[str, Any], *, root: str | Path | None = None) -> AppResource:
    """The application a resource describes; :class:`SpecError` says what is wrong.

    ``root``: where the spec's relative paths are (default :func:`app_root`).
    """
    metadata = resource.get("metadata") or {}
    spec = resource.get("spec") or {}
    layout = Layout.from_spec(spec)
    base = Path(root if root is not None else app_root(layout)) / layout.blueprint_dir
    try:
        data = {key: value for key, value in spec.items() if key not in DEPLOY_TIME}
        data["source"] = _resolved(base, layout.source) if layout.source else ""
        data["pythonPaths"] = [_resolved(base, p) for p in layout.python_paths]
        data["schemaPaths"] = [_resolved(base, p) for p in layout.schema_paths]
        app = fields.from_plain(Application, data, naming=camel_case)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise SpecError(
            f"spec cannot be read as an application: {type(exc).__name__}: {exc}"
        ) from None
    _check_references(app)
    _check_autoscale(app)
    streamlets = spec.get("streamlets") or {}
    pods = PodSettings(
        image=str(spec.get("image") or ""),
        image_pull_policy=spec.get("imagePullPolicy") or "IfNotPresent",
        resources=spec.get("resources") or dict(DEFAULT_RESOURCES),
        streamlet_resources={
            name: s["resources"] for name, s in streamlets.items() if s.get("resources")
        },
    )
    return AppResource(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        generation=int(metadata.get("generation") or 0),
        app=app,
        pods=pods,
        layout=layout,
    )


def _resolved(base: Path, path: str) -> str:
    return os.path.normpath(base / path)


def _check_references(app: Application) -> None:
    """Topics must name streamlets the application has: the schema cannot say so."""
    unknown = sorted(
        f"spec.topics.{topic.name}: {ref} names no streamlet of spec.streamlets"
        for topic in app.topics.values()
        for ref in (*topic.producers, *topic.consumers)
        if ref.streamlet not in app.streamlets
    )
    if unknown:
        raise SpecError("; ".join(unknown))


def _check_autoscale(app: Application) -> None:
    """Bounds the policy can keep, as the verifier requires of a blueprint.

    The CRD's schema checks each number alone, but not ``min <= max``; without
    this an autoscaler would find every count outside its bounds, tick after tick.
    """
    problems = []
    for name, streamlet in sorted(app.streamlets.items()):
        auto = streamlet.autoscale
        if auto is None:
            continue
        where = f"spec.streamlets.{name}.autoscale"
        if auto.min < 0:
            problems.append(f"{where}.min ({auto.min}) must be 0 or more")
        if auto.max < 1:
            problems.append(f"{where}.max ({auto.max}) must be 1 or more")
        if auto.min > auto.max:
            problems.append(
                f"{where}: min ({auto.min}) is above max ({auto.max}); "
                "min is the fewest replicas, max the most"
            )
        if auto.target_lag < 1:
            problems.append(f"{where}.targetLag ({auto.target_lag}) must be 1 or more")
        for window in ("scale_up_after", "scale_down_after"):
            if getattr(auto, window) < 0:
                key = camel_case(window)
                problems.append(f"{where}.{key} ({getattr(auto, window)}) must be 0 or more")
    if problems:
        raise SpecError("; ".join(problems))


def to_spec(app: Application, pods: PodSettings | None = None) -> dict[str, Any]:
    """The spec of the resource that deploys ``app``: its plain dict plus pod settings.

    :class:`PathError` when the application's files cannot be named inside its project.
    A streamlet's resources are, from weakest to strongest: the default of its
    kind (:data:`SERVING_RESOURCES` for one that follows a model), what the
    deployed resource had, what its blueprint says.
    """
    pods = pods or PodSettings()
    data: dict[str, Any] = without_nulls(fields.to_plain(app, naming=camel_case))
    for key in ("source", "pythonPaths", "schemaPaths"):  # the layout's, relative
        data.pop(key, None)
    for name, streamlet in data["streamlets"].items():
        own = _merged(
            _kind_default(app, name),
            pods.streamlet_resources.get(name),
            app.streamlets[name].resources,
        )
        if own:
            streamlet["resources"] = own
    # as a person reads it: what it is, where its files are, its Kafka, then the rest
    spec = {
        "name": data.pop("name"),
        **Layout.of(app).to_spec(),
        "kafka": data.pop("kafka"),
        **data,
    }
    spec.update(pods.to_spec())
    return spec


def _kind_default(app: Application, streamlet: str) -> Mapping[str, Mapping[str, str]] | None:
    """:data:`SERVING_RESOURCES` for a streamlet with a control inlet (it loads models)."""
    try:
        following = bool(app.descriptor(streamlet).control_inlets)
    except Exception:  # the class cannot be imported here: no kind-specific default
        return None
    return SERVING_RESOURCES if following else None


def _merged(*layers: Mapping[str, Mapping[str, str]] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for layer in layers:
        for kind, amounts in (layer or {}).items():
            out.setdefault(kind, {}).update(amounts)
    return out


def pod_app_spec(resource: AppResource, streamlet: str) -> dict[str, Any]:
    """What one streamlet's pods run (``--app-spec``): only what concerns that streamlet.

    The other streamlets, and the topics it is not bound to, are left out, so
    a change to another streamlet changes nothing here and rolls none of its
    pods; the paths are the spec's, relative to the pods' working directory.
    """
    data = resource.app.to_dict()
    data["source"] = resource.layout.source
    data["python_paths"] = list(resource.layout.python_paths)
    data["schema_paths"] = list(resource.layout.schema_paths)
    # How many replicas run, within which bounds and with what resources is the
    # Deployment's business, not the replica's: a scale must roll nothing.
    own = data["streamlets"][streamlet]
    data["streamlets"] = {
        streamlet: {k: v for k, v in own.items() if k not in ("replicas", "autoscale", "resources")}
    }
    topics = {}
    for name, topic in data["topics"].items():
        producers = [p for p in topic["producers"] if p.partition(".")[0] == streamlet]
        consumers = [c for c in topic["consumers"] if c.partition(".")[0] == streamlet]
        if producers or consumers:
            topics[name] = {**topic, "producers": producers, "consumers": consumers}
    data["topics"] = topics
    return without_nulls(data)  # type: ignore[no-any-return]


def body(app: Application, *, namespace: str, pods: PodSettings | None = None) -> dict[str, Any]:
    """A whole StreamflowApplication for ``app``, named after it."""
    metadata: dict[str, Any] = {"name": names.resource_name(app.name)}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/part-of": names.label_value(app.name)}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": metadata,
        "spec": to_spec(app, pods),
    }


# -- names -----------------------------------------------------------------------------------


def spec_name(parents: tuple[str, ...], key: str) -> str:
    """An Application field, under the fields ``parents``, as the spec spells it.

    A field of the Application's table is camelCased; anything else (a streamlet's or
    topic's name, a ``config`` key) is as written.
    """
    return fields.spec_path(Application, parents, key, naming=camel_case)


def without_nulls(value: Any) -> Any:
    """``value`` with every null field dropped, at any depth."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value
