"""`streamflow model rollout`, as a user runs it, against running replicas on a real broker.

A canary starts beside the stable model, grows, is promoted; a shadow starts and is
aborted. After each command returns (every replica has said so), the records written
next (once the ones before have their outputs) meet exactly the versions the split says,
key by key; records written all along, while the commands ran, are all there (once each
under exactly-once), and no key ever goes back to an older version.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from streamflow.models.rollout import candidate_rows
from tests.cli.test_model_cmds import _cli, _register
from tests.model_fixtures import WineModels
from tests.runtime import support
from tests.streamlets.serving import kafka_support as k
from tests.streamlets.serving import serving_support as s

pytestmark = pytest.mark.integration

KEYS = [f"customer-{i}" for i in range(200)]


def _phase(name: str, models: WineModels) -> list[tuple[str, bytes]]:
    """A record per key, with ids ``<name>-<i>``."""
    codec = k.codec_of("examples.wine.WineFeatures")
    rows = []
    for i, key in enumerate(KEYS):
        value = {"id": f"{name}-{i}", "label": None}
        value.update({f: float(models.x[i % 178][j]) for j, f in enumerate(s.FEATURES)})
        rows.append((key, codec.encode(value)))
    return rows


def _outputs(bootstrap: str, topic: str, n: int) -> list[tuple[Message, dict[str, Any]]]:
    codec = k.codec_of("examples.wine.WinePrediction")
    found = support.consume_until(bootstrap, topic, support.count_at_least(n), timeout=120)
    return [(m, codec.decode(m.value())) for m in found]


def _versions(outputs: list[tuple[Message, dict[str, Any]]], phase: str) -> dict[str, int]:
    """The version that served each key's record of ``phase``."""
    return {
        m.key().decode(): v["model_version"]  # type: ignore[union-attr]
        for m, v in outputs
        if v["id"].startswith(f"{phase}-")
    }


def _split(share: float, version: int) -> dict[str, int]:
    chosen = candidate_rows(share, version, [key.encode() for key in KEYS])
    return {key: version if c else 1 for key, c in zip(KEYS, chosen, strict=True)}


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_canary_grows_and_is_promoted_and_a_shadow_is_aborted_with_nothing_lost(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels, guarantee: str
) -> None:
    home = tmp_path / "home"
    app = k.app(kafka_bootstrap, 2, tmp_path / "cache", guarantee=guarantee, shadow=True)
    _register(home, app, kafka_bootstrap)
    features = support.topic(app, "features")
    predictions = support.topic(app, "predictions")
    onnx = {v: str(wine_models[v].onnx_file) for v in (1, 2)}

    def cli(*args: str) -> Any:
        done = _cli(*args, home=home)
        assert done.returncode == 0, done.stdout + done.stderr + running.log()
        assert "Traceback" not in done.stderr
        return done

    with support.replicas(app, tmp_path) as running:
        running.start("classifier", 0)
        running.start("classifier", 1)
        cli("model", "push", app.name, "classifier", "--onnx", onnx[1], "--name", "wine")
        live = [
            (key, value)
            for p in ("live1", "live2", "live3")
            for key, value in _phase(p, wine_models)
        ]
        feeder = k.produce_paced(kafka_bootstrap, features, live, rate=150)  # all along
        phases: list[tuple[str, dict[str, int]]] = []

        def phase(name: str, expected: dict[str, int]) -> None:
            """Write a record per key, and wait until each has its output: records written
            before a command may be served after it (the control topic is another topic)."""
            support.produce(kafka_bootstrap, features, _phase(name, wine_models))
            phases.append((name, expected))
            ids = {f"{name}-{i}" for i in range(len(KEYS))}
            codec = k.codec_of("examples.wine.WinePrediction")
            support.consume_until(
                kafka_bootstrap,
                predictions,
                lambda found: ids <= {codec.decode(m.value())["id"] for m in found},
                timeout=120,
            )

        phase("before", dict.fromkeys(KEYS, 1))
        started = cli(
            "model", "rollout", "start", app.name, "classifier",
            "--onnx", onnx[2], "--mode", "canary", "--share", "30",
        )  # fmt: skip
        assert "rolling out wine:2 as a candidate (canary 30% of the keys)" in started.stdout
        assert "classifier serves wine:2 on 2/2 replicas" in started.stderr
        phase("canary30", _split(30.0, 2))
        grown = cli("model", "rollout", "set", app.name, "classifier", "--share", "70")
        assert "wine:2 now meets: canary 70% of the keys" in grown.stdout
        phase("canary70", _split(70.0, 2))
        status = json.loads(
            cli("model", "rollout", "status", app.name, "classifier", "-o", "json").stdout
        )
        assert (status["stable"], status["candidate"]) == (1, 2)
        assert status["rollout"] == {"mode": "CANARY", "share": 70.0, "arms": []}
        cli("model", "rollout", "promote", app.name, "classifier")
        phase("promoted", dict.fromkeys(KEYS, 2))
        shadowed = cli(
            "model", "rollout", "start", app.name, "classifier",
            "--onnx", onnx[1], "--mode", "shadow",
        )  # fmt: skip
        assert "wine:3 as a candidate (shadow of every record)" in shadowed.stdout
        phase("shadowed", dict.fromkeys(KEYS, 2))
        aborted = cli("model", "rollout", "abort", app.name, "classifier")
        assert "classifier has retired wine:3 on 2/2 replicas" in aborted.stderr
        phase("after", dict.fromkeys(KEYS, 2))
        feeder.join(60)
        total = len(KEYS) * len(phases) + len(live)
        out = _outputs(kafka_bootstrap, predictions, total)
        shadows = _outputs(kafka_bootstrap, support.topic(app, "shadows"), len(KEYS))
        dead = support.consume_until(
            kafka_bootstrap, app.dlq_topic("classifier"), lambda r: False, timeout=1
        )
        status = json.loads(
            cli("model", "rollout", "status", app.name, "classifier", "-o", "json").stdout
        )
        log = running.log()
    assert not dead, log
    ids = [v["id"] for _, v in out]
    expected_ids = {f"{p}-{i}" for p, _ in phases for i in range(len(KEYS))}
    expected_ids |= {f"live{n}-{i}" for n in (1, 2, 3) for i in range(len(KEYS))}
    assert set(ids) == expected_ids, log  # nothing lost
    if guarantee == "exactly-once":
        assert len(ids) == len(expected_ids)  # nor written twice
    for name, expected in phases:
        assert _versions(out, name) == expected, name
    # each output says who made it, in its value and its header
    for message, value in out:
        header = dict(message.headers() or ())["streamflow-model"].decode()
        assert header == f"wine:{value['model_version']}"
    # along the live feed, a key never goes back to an older version
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for message, value in out:
        if value["id"].startswith("live"):
            by_key[message.key()].append(value["model_version"])  # type: ignore[index]
    assert all(v == sorted(v) for v in by_key.values())
    # the shadow saw the "shadowed" phase, as version 3, beside the stable outputs
    shadowed_ids = {v["id"] for _, v in shadows if v["id"].startswith("shadowed-")}
    assert shadowed_ids == {f"shadowed-{i}" for i in range(len(KEYS))}
    assert {v["model_version"] for _, v in shadows} == {3}
    assert not {v["id"] for _, v in shadows if v["id"].startswith(("before", "after", "promoted"))}
    assert (status["stable"], status["candidate"]) == (2, None)


def test_rollout_usage_errors_and_refusals_are_clear(
    kafka_bootstrap: str, tmp_path: Path, wine_models: WineModels
) -> None:
    home = tmp_path / "home"
    app = k.app(kafka_bootstrap, 1, tmp_path / "cache")
    _register(home, app, kafka_bootstrap)
    onnx = str(wine_models.v2.onnx_file)
    base = ("model", "rollout")
    cases = {
        (*base, "start", app.name, "classifier", "--onnx", onnx, "--share", "150"): (
            2,
            "share 150.0 is out of range",
        ),
        (*base, "start", app.name, "classifier", "--onnx", onnx, "--mode", "blue"): (
            2,
            "--mode 'blue': use shadow, canary or ab",
        ),
        (*base, "start", app.name, "classifier", "--onnx", onnx, "--mode", "ab"): (
            2,
            "an AB rollout names two arms",
        ),
        (*base, "start", app.name, "classifier", "--onnx", onnx): (
            1,
            "no stable version to roll out against",
        ),
        (*base, "promote", app.name, "classifier"): (1, "no rollout of a model runs"),
        (*base, "set", app.name, "classifier"): (2, "give --share, --mode or both"),
    }
    for args, (code, said) in cases.items():
        done = _cli(*args, home=home)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert said in " ".join(done.stderr.split()), (args, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr
    # with no replica running (--timeout 0: written, not waited for), set's rules
    no_wait = ("--timeout", "0")
    pushed = _cli("model", "push", app.name, "classifier", "--onnx", onnx, *no_wait, home=home)
    assert pushed.returncode == 0, pushed.stderr
    shadow = (*base, "start", app.name, "classifier", "--onnx", onnx, "--mode", "shadow")
    assert _cli(*shadow, *no_wait, home=home).returncode == 0
    again = _cli(*shadow, *no_wait, home=home)
    assert again.returncode == 1 and "wine-v2:2 is rolling out already" in again.stderr
    for args, said in {
        ("--share", "10"): "--share is for canary and ab",
        ("--mode", "canary"): "give --share: the candidate runs as a shadow",
        ("--mode", "canary", "--share", "10", "--arms", "a,b"): "arms are for AB rollouts",
    }.items():
        done = _cli(*base, "set", app.name, "classifier", *args, *no_wait, home=home)
        assert done.returncode == 2 and said in " ".join(done.stderr.split()), done.stderr
    to_ab = (*base, "set", app.name, "classifier", "--mode", "ab", "--share", "20")
    done = _cli(*to_ab, "--arms", "control,treatment", *no_wait, home=home)
    assert done.returncode == 0, done.stderr
    done = _cli(*base, "set", app.name, "classifier", "--mode", "canary", *no_wait, home=home)
    assert done.returncode == 0, done.stderr  # the share kept, the arms dropped
    status = _cli(*base, "status", app.name, "classifier", "-o", "json", home=home)
    rollout = json.loads(status.stdout)["rollout"]
    assert rollout == {"mode": "CANARY", "share": 20.0, "arms": []}
