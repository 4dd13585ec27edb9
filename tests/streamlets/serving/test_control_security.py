"""The model control stream against an attacker who can write descriptors (issue 10, 1-5 and 9).

Whoever writes the control topic chooses what a replica loads and which host
it calls. These tests play that writer: descriptors that try to reach a host
outside the allowlist, read a file outside an allowed prefix, pass any file
off as a verified artifact, walk out of a model server's path, read a server's
answer back through the status topic, or stall every later version. Each
server in them is a real local HTTP server; nothing in the replica is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from streamflow.models import artifacts
from streamflow.models.artifacts import allowed
from streamflow.models.descriptor import ModelDescriptor
from tests.model_fixtures import WineModels
from tests.streamlets.explain import explain_support as e
from tests.streamlets.serving import serving_support as s
from tests.streamlets.serving.hostile_servers import hostile

# -- 1. remote descriptors and the allowlist -----------------------------------------


@pytest.mark.parametrize("kind", ["TF_SERVING", "OPEN_INFERENCE_V2"])
def test_a_remote_descriptor_with_inline_data_is_refused_and_no_server_is_called(
    tmp_path: Path, kind: str
) -> None:
    with hostile() as evil:
        evil.body("*", b"{}")
        h = s.harness(tmp_path, allowlist=["http://127.0.0.2:"])
        out = h.control("model", s.descriptor(1, kind, data=b"anything", location=evil.url))
        status = out[0].value
        assert status["state"] == "rejected", status
        assert "inline data" in status["message"]
        time.sleep(0.3)
        assert evil.requests == []


def test_an_embedded_descriptor_with_data_and_a_location_outside_the_allowlist_is_refused(
    tmp_path: Path, wine_models: WineModels
) -> None:
    keras = wine_models.v1.keras_file.read_bytes()
    h = s.harness(tmp_path)
    out = h.control("model", s.descriptor(1, "KERAS", data=keras, location="http://10.9.9.9/m"))
    assert out[0].value["state"] == "rejected"
    assert "not in the allowlist" in out[0].value["message"]


def test_the_allowlist_is_checked_again_where_the_client_is_built(tmp_path: Path) -> None:
    with hostile() as evil:
        evil.body("*", b"{}")
        h = s.harness(tmp_path, allowlist=["http://127.0.0.2:"])
        follower: Any = h.streamlet
        with pytest.raises(artifacts.Rejected):  # past on_control, as a bug there would be
            follower._load(
                ModelDescriptor.from_record(s.descriptor(1, "OPEN_INFERENCE_V2", location=evil.url))
            )
        assert evil.requests == []


def test_the_explainer_refuses_a_remote_descriptor_with_inline_data(tmp_path: Path) -> None:
    with hostile() as evil:
        evil.body("*", b"{}")
        h = e.harness(tmp_path, allowlist=["http://127.0.0.2:"])
        descriptor = e.descriptor(1, kind="OPEN_INFERENCE_V2", location=evil.url, data=b"x")
        out = h.control("model", descriptor)
        assert out[0].value["state"] == "rejected"
        time.sleep(0.3)
        assert evil.requests == []


# -- 2. nothing from a server's body on the status topic ------------------------------

SECRET = "SECRET-3f9c-internal-token"


@pytest.mark.parametrize(
    ("ready", "metadata"),
    [
        ((503, SECRET), (200, "{}")),
        ((200, ""), (404, SECRET)),
        ((200, ""), (200, SECRET)),
        (
            (200, ""),
            (
                200,
                json.dumps(
                    {
                        "inputs": [{"name": "input", "datatype": "FP32", "shape": [SECRET]}],
                        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}],
                    }
                ),
            ),
        ),
        (
            (200, ""),
            (200, json.dumps({"inputs": [{"datatype": SECRET}], "outputs": [SECRET]})),
        ),
    ],
    ids=["ready-503", "metadata-404", "metadata-not-json", "metadata-bad-shape", "metadata-bad"],
)
def test_nothing_from_a_model_servers_body_reaches_the_status(
    tmp_path: Path, ready: tuple[int, str], metadata: tuple[int, str]
) -> None:
    with hostile() as server:
        server.body("/v2/models/wine/ready", ready[1].encode(), status=ready[0])
        server.body("/v2/models/wine", metadata[1].encode(), status=metadata[0])
        h = s.harness(tmp_path)
        h.control("model", s.descriptor(1, "OPEN_INFERENCE_V2", location=server.url))
        status = s.settle(h, 1)
    assert status["state"] == "failed", status
    assert "SECRET" not in status["message"], status["message"]


# -- 3. the allowlist matches URL parts, not string prefixes -------------------------


@pytest.mark.parametrize(
    ("location", "entry", "expected"),
    [
        ("http://models.internal/wine", "http://models.internal", True),
        ("http://models.internal.evil.com/wine", "http://models.internal", False),
        ("http://models.internal@evil.com/", "http://models.internal", False),
        ("http://models.internal:80@evil.com/", "http://models.internal:", False),
        ("http://MODELS.internal/wine", "http://models.internal/", True),
        ("http://models.internal:8080/wine", "http://models.internal", False),
        ("http://models.internal:8080/wine", "http://models.internal:", True),
        ("http://models.internal:8080/wine", "http://models.internal:8080", True),
        ("https://models.internal/wine", "http://models.internal", False),
        ("http://models.internal/teamb/x", "http://models.internal/teama", False),
        ("http://models.internal/teama-evil/x", "http://models.internal/teama", False),
        ("http://models.internal/teama/x", "http://models.internal/teama", True),
        ("http://models.internal/teama/../teamb/x", "http://models.internal/teama/", False),
        ("http://models.internal/teama/%2e%2e/teamb/x", "http://models.internal/teama/", False),
        ("file:///models/wine.keras", "file:///models/", True),
        ("file:///models-evil/wine.keras", "file:///models", False),
        ("file:///models/../etc/passwd", "file:///models/", False),
        ("file:///models/%2e%2e/etc/passwd", "file:///models/", False),
        ("file:///models/%2E%2E%2Fetc/passwd", "file:///models/", False),
        ("file:///models/a%00b", "file:///models/", False),
        ("file://evil.com/models/wine.keras", "file:///models/", False),
        ("ftp://127.0.0.1/x", "ftp://", False),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:", True),
        ("http://evil.example/x", "http://127.0.0.1:", False),
        ("http://127.0.0.1:99999/", "http://127.0.0.1:", False),
    ],
)
def test_allowlist_matches_scheme_host_port_and_path_segments(
    location: str, entry: str, expected: bool
) -> None:
    assert allowed(location, [entry]) is expected


def test_userinfo_cannot_send_the_replica_to_another_host(tmp_path: Path) -> None:
    with hostile() as evil:
        evil.body("*", b"{}")
        h = s.harness(tmp_path, allowlist=["http://127.0.0.2:"])
        location = f"http://127.0.0.2:1@127.0.0.1:{evil.port}/"
        out = h.control("model", s.descriptor(1, "OPEN_INFERENCE_V2", location=location))
        final = out[0].value if out[0].value["state"] != "loading" else s.settle(h, 1)
        assert final["state"] == "rejected", final
        assert evil.requests == []


def test_a_percent_encoded_dotdot_does_not_leave_a_file_prefix(
    tmp_path: Path, wine_models: WineModels
) -> None:
    (tmp_path / "models").mkdir()
    outside = tmp_path / "outside.keras"
    outside.write_bytes(wine_models.v1.keras_file.read_bytes())
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    h = s.harness(tmp_path, allowlist=[(tmp_path / "models").as_uri() + "/"])
    location = (tmp_path / "models").as_uri() + "/%2e%2e/outside.keras"
    out = h.control("model", s.descriptor(1, "KERAS", location=location, sha256=digest))
    final = out[0].value if out[0].value["state"] != "loading" else s.settle(h, 1)
    assert final["state"] == "rejected", final


# -- 4. sha256: required for locations, a digest and nothing else ---------------------


def _models_dir(tmp_path: Path, wine_models: WineModels) -> tuple[Path, str]:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    (models / "wine.keras").write_bytes(wine_models.v1.keras_file.read_bytes())
    return models, hashlib.sha256((models / "wine.keras").read_bytes()).hexdigest()


@pytest.mark.parametrize("form", ["relative", "absolute", "upper-case-short", "missing"])
def test_a_location_needs_a_sha256_that_is_a_digest(
    tmp_path: Path, wine_models: WineModels, form: str
) -> None:
    models, digest = _models_dir(tmp_path, wine_models)
    secret = tmp_path / "not-an-artifact.keras"  # any readable file, posing as verified
    secret.write_bytes(wine_models.v2.keras_file.read_bytes())
    cache = tmp_path / "cache"
    sha256 = {
        "relative": os.path.relpath(secret, cache),
        "absolute": str(secret),
        "upper-case-short": digest.upper()[:40],
        "missing": None,
    }[form]
    h = s.harness(tmp_path, allowlist=[models.as_uri() + "/"])
    location = (models / "absent.keras").as_uri() if form != "missing" else None
    location = location or (models / "wine.keras").as_uri()
    out = h.control("model", s.descriptor(1, "KERAS", location=location, sha256=sha256))
    final = out[0].value if out[0].value["state"] != "loading" else s.settle(h, 1)
    assert final["state"] == "rejected", final
    assert "sha256" in final["message"]


def test_fetch_refuses_a_sha256_that_is_a_path(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    with pytest.raises(artifacts.ArtifactError, match="sha256"):
        artifacts.fetch(
            data=None,
            location=(tmp_path / "models" / "x").as_uri(),
            sha256=str(secret),
            allowlist=[(tmp_path / "models").as_uri()],
            cache_dir=tmp_path / "cache",
        )


def test_a_tampered_cache_entry_is_fetched_again_and_the_cache_is_private(
    tmp_path: Path, wine_models: WineModels
) -> None:
    models, digest = _models_dir(tmp_path, wine_models)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / digest).write_bytes(b"tampered: not the pushed model")
    h = s.harness(tmp_path, allowlist=[models.as_uri() + "/"])
    descriptor = s.descriptor(1, "KERAS", location=(models / "wine.keras").as_uri(), sha256=digest)
    h.control("model", descriptor)
    status = s.settle(h, 1)
    assert status["state"] == "serving", status
    assert hashlib.sha256((cache / digest).read_bytes()).hexdigest() == digest


def test_the_cache_directory_is_created_private(tmp_path: Path, wine_models: WineModels) -> None:
    h = s.harness(tmp_path)
    h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    assert s.settle(h, 1)["state"] == "serving"
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700


# A cache folder another user owns (or may write) lets that user swap the models this
# replica serves; it was used as long as it existed (security review, finding 3).


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the cache to another user with chown")
def test_a_cache_folder_owned_by_another_user_is_refused(
    tmp_path: Path, wine_models: WineModels
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chown(cache, 12345, 12345)
    cache.chmod(0o777)
    h = s.harness(tmp_path)
    h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    status = s.settle(h, 1)
    assert status["state"] == "failed", status
    for detail in (str(cache), "uid 12345", "0777", "cache_dir"):
        assert detail in status["message"], status["message"]
    assert list(cache.iterdir()) == []  # nothing was written into it
    assert stat.S_IMODE(cache.stat().st_mode) == 0o777 and cache.stat().st_uid == 12345


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o777], ids=["0700", "0755", "0777"])
def test_a_cache_folder_not_ours_is_refused_whatever_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(mode)
    owner = cache.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # as another user sees it
    with pytest.raises(artifacts.ArtifactError, match=f"owned by uid {owner}"):
        artifacts.private_dir(cache)
    monkeypatch.undo()
    assert stat.S_IMODE(cache.stat().st_mode) == mode  # not ours to change


def test_a_cache_folder_of_ours_open_to_others_is_made_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    artifacts.private_dir(cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


# -- 5. a model name stays one path segment -------------------------------------------


def test_a_model_parameter_cannot_leave_the_servers_model_path(tmp_path: Path) -> None:
    with hostile() as server:
        server.body("*", b"{}")
        h = s.harness(tmp_path)
        parameters = {"model": "../../admin/reset"}
        h.control(
            "model",
            s.descriptor(1, "OPEN_INFERENCE_V2", location=server.url, parameters=parameters),
        )
        s.settle(h, 1)
    assert server.requests, "the replica should have asked the server"
    assert all(p.startswith("/v2/models/..%2F..%2Fadmin%2Freset") for p in server.requests)


def test_the_explainer_quotes_the_model_name_into_the_explain_url(tmp_path: Path) -> None:
    with hostile() as server:
        server.body("*", b"{}")
        h = e.harness(
            tmp_path, method="remote", explainer_url=server.url, retries=0, breaker_failures=1
        )
        model = e.linear_model(tmp_path / "linear.keras")
        h.control("model", {**e.descriptor(1, model), "name": "../../admin/reset"})
        assert e.settle(h, 1)["state"] == "serving"
        h.feed("in", e.points(3, seed=1))
        h.run()
        h.teardown()
    assert server.requests, "the explainer should have called the server"
    assert all(p.startswith("/v1/models/..%2F..%2Fadmin%2Freset:explain") for p in server.requests)


# -- 9. a newer descriptor supersedes a stuck load ------------------------------------


def test_a_newer_version_supersedes_a_stuck_download(
    tmp_path: Path, wine_models: WineModels
) -> None:
    body = b"x" * 40
    with hostile() as server:
        server.drip("/v1.keras", body, every=0.5)  # 20 s in all
        h = s.harness(tmp_path)
        v1 = s.descriptor(
            1,
            "KERAS",
            location=server.url + "/v1.keras",
            sha256=hashlib.sha256(body).hexdigest(),
        )
        h.control("model", v1)
        time.sleep(0.5)  # v1 is downloading
        started = time.monotonic()
        out = h.control(
            "model", s.descriptor(2, "KERAS", data=wine_models.v2.keras_file.read_bytes())
        )
        status = s.settle(h, 2)
        took = time.monotonic() - started
        states = [(o.value["version"], o.value["state"]) for o in out if o.outlet == "status"]
        assert status["state"] == "serving", status
        assert took < 12, f"v2 waited {took:.1f}s for v1's download"
        assert (1, "superseded") in states, states
        time.sleep(1.0)
        later = [(o.value["version"], o.value["state"]) for o in h.between_batches()]
        assert (1, "serving") not in later and (1, "failed") not in later
        assert h.streamlet.current.version == 2  # type: ignore[attr-defined]
        # the abandoned download stopped reading soon after it was superseded
        assert server.bytes_sent("/v1.keras") < len(body)
        h.teardown()
