"""Fetching the embedded broker's pinned jars: checksums refused, downloads resumed, errors
that say what to do, and the cache that `streamflow run` and `devkit info` share.

Each test serves files from a Maven mirror on 127.0.0.1 (tests/devkit/maven_mirror.py):
the real HTTP client, Range requests and all, without the network.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from streamflow import devkit
from streamflow.cli.main import app
from streamflow.devkit import download, kafka_jars
from tests.devkit.maven_mirror import Mirror, kafka_files, serving

BLOB = bytes(range(256)) * 4096  # 1 MiB, so a download takes several chunks


def _pinned(mirror: Mirror, tmp_path: Path, *, body: bytes = BLOB) -> download.Pinned:
    return download.Pinned(
        url=f"{mirror.url}/g/a/1/a-1.jar",
        path=tmp_path / "a-1.jar",
        size=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
    )


def _download(item: download.Pinned) -> int:
    """Download ``item``; the bytes the progress was told about, net."""
    counted = 0

    def advance(count: int) -> None:
        nonlocal counted
        counted += count

    with httpx.Client() as client:
        download.download(client, item, advance=advance)
    return counted


def test_a_download_is_kept_only_when_its_checksum_matches(tmp_path: Path) -> None:
    tampered = BLOB[:-1] + b"\x00"
    with serving(Mirror({"/maven2/g/a/1/a-1.jar": tampered})) as mirror:
        item = _pinned(mirror, tmp_path)
        with pytest.raises(download.FetchError, match="does not match its pinned SHA-256") as e:
            _download(item)
    assert e.value.kind == "checksum"
    assert not item.path.exists() and not item.part.exists()  # nothing of it kept


def test_a_partial_download_resumes_with_a_range_request(tmp_path: Path) -> None:
    with serving(Mirror({"/maven2/g/a/1/a-1.jar": BLOB})) as mirror:
        item = _pinned(mirror, tmp_path)
        item.part.write_bytes(BLOB[:300_000])  # what an interrupted fetch left
        counted = _download(item)
    assert item.path.read_bytes() == BLOB and not item.part.exists()
    assert counted == len(BLOB)
    [request] = mirror.requests
    assert (request.range, request.status, request.sent) == (
        "bytes=300000-",
        206,
        len(BLOB) - 300_000,
    )


def test_a_server_that_ignores_the_range_gets_the_part_rewritten(tmp_path: Path) -> None:
    with serving(Mirror({"/maven2/g/a/1/a-1.jar": BLOB}, honour_range=False)) as mirror:
        item = _pinned(mirror, tmp_path)
        item.part.write_bytes(BLOB[:300_000])
        _download(item)
    assert item.path.read_bytes() == BLOB
    assert [(r.status, r.sent) for r in mirror.requests] == [(200, len(BLOB))]


def test_a_resumed_part_that_was_wrong_is_fetched_again_from_the_start(tmp_path: Path) -> None:
    with serving(Mirror({"/maven2/g/a/1/a-1.jar": BLOB})) as mirror:
        item = _pinned(mirror, tmp_path)
        item.part.write_bytes(b"\xff" * 1000)  # not a prefix of the file
        _download(item)
    assert item.path.read_bytes() == BLOB
    assert [(r.range, r.status) for r in mirror.requests] == [("bytes=1000-", 206), (None, 200)]


def test_a_file_already_in_place_is_verified_not_fetched(tmp_path: Path) -> None:
    with serving(Mirror({})) as mirror:
        item = _pinned(mirror, tmp_path)
        item.path.write_bytes(BLOB)
        assert _download(item) == len(BLOB)
    assert mirror.requests == []


def test_offline_is_one_sentence_that_says_what_to_do(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(download.FetchError) as error:
        kafka_jars.fetch(tmp_path / "lib", base_url=f"http://127.0.0.1:{port}/maven2")
    message = str(error.value)
    assert error.value.kind == "network"
    assert message.startswith("Could not fetch the Kafka jars: could not connect to 127.0.0.1")
    assert "offline" in message and "HTTPS_PROXY" in message
    assert "STREAMFLOW_MAVEN_URL" in message and "Traceback" not in message
    assert not kafka_jars.is_complete(tmp_path / "lib")


def test_a_404_names_the_mirror(tmp_path: Path) -> None:
    with serving(Mirror({})) as mirror, pytest.raises(download.FetchError) as error:
        kafka_jars.fetch(tmp_path / "lib", base_url=mirror.url)
    assert error.value.kind == "http"
    assert "HTTP 404" in str(error.value) and mirror.url in str(error.value)


@pytest.fixture(scope="module")
def repository_jars() -> Path:
    """The checkout's jars (tools/fetch-kafka), to seed the mirror with the pinned files."""
    lib = devkit.find_kafka_lib()
    assert kafka_jars.is_complete(lib), f"{lib} is not a complete fetch: run tools/fetch-kafka"
    return lib


def test_fetch_fills_the_cache_that_run_and_info_use(
    repository_jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no tools/kafka/lib above
    with serving(Mirror(kafka_files(repository_jars))) as mirror:
        monkeypatch.setenv("STREAMFLOW_MAVEN_URL", mirror.url)
        before = CliRunner().invoke(app, ["devkit", "info", "-o", "json"])
        fetched = CliRunner().invoke(app, ["devkit", "fetch"])
        again = CliRunner().invoke(app, ["devkit", "fetch", "-q"])
    assert fetched.exit_code == 0, fetched.output
    lib = tmp_path / "cache" / "kafka" / kafka_jars.pins().kafka_version
    assert fetched.stdout.strip() == str(lib) == again.stdout.strip()
    assert len(mirror.requests) == len(kafka_jars.pins().jars)  # the second fetch: none
    assert '"cached_state": "not fetched"' in before.stdout
    assert kafka_jars.is_complete(lib)  # (in a checkout, run still prefers tools/kafka/lib)
    info = CliRunner().invoke(app, ["devkit", "info"])
    assert "complete" in info.stdout and str(lib) in info.stdout


def test_a_tampered_jar_in_the_mirror_stops_the_fetch(
    repository_jars: Path, tmp_path: Path
) -> None:
    files = kafka_files(repository_jars)
    victim = next(iter(files))
    files[victim] = b"not the jar"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kafka_2.13-0.0.1.jar").write_bytes(b"an old version left behind")
    with serving(Mirror(files)) as mirror, pytest.raises(download.FetchError) as error:
        kafka_jars.fetch(lib, base_url=mirror.url)
    assert error.value.kind == "checksum" and victim in str(error.value)
    assert not kafka_jars.is_complete(lib)
    # What the stopped fetch left (how much depends on the threads): whole jars, and parts
    whole = {p.name for p in lib.glob("*.jar")} - {"kafka_2.13-0.0.1.jar"}
    parts = {p.name.removesuffix(".part"): p.stat().st_size for p in lib.glob("*.part")}

    with serving(Mirror(kafka_files(repository_jars))) as mirror:
        kafka_jars.fetch(lib, base_url=mirror.url)  # the next try completes
    assert kafka_jars.is_complete(lib)
    assert not (lib / "kafka_2.13-0.0.1.jar").exists()  # the stray is gone
    asked = {request.path.rpartition("/")[2]: request.range for request in mirror.requests}
    sizes = {jar.file_name: jar.size for jar in kafka_jars.pins().jars}
    had = whole | {name for name, size in parts.items() if size == sizes[name]}
    assert not had & asked.keys()  # a jar (or a whole part) kept before is not fetched again
    assert asked.keys() == sizes.keys() - had
    for name, size in parts.items():  # a part is resumed where it stopped
        if name not in had:
            assert asked[name] == (f"bytes={size}-" if size else None)


def test_a_java_too_old_is_one_sentence_before_any_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with serving(Mirror({})) as mirror:
        monkeypatch.setenv("STREAMFLOW_MAVEN_URL", mirror.url)
        result = CliRunner().invoke(app, ["devkit", "fetch", "--lib-dir", str(tmp_path / "lib")])
    assert result.exit_code == 1
    assert f"{java} is Java 11, but the embedded Kafka needs Java 17 or newer" in result.output
    assert "Traceback" not in result.output
    assert mirror.requests == []  # nothing downloaded for a Java that cannot run it
