"""A rollout in one serving streamlet: the stable model and a candidate, switched live.

The candidate comes as a descriptor with a ``rollout``: a shadow of every record, or a
canary or AB share of the keys. Each output says which version made it; a share change,
a promotion and a rollback are control records that take effect between batches, with
no record lost and no second load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamflow.models.rollout import candidate_rows
from streamflow.testkit import StreamletHarness
from tests.model_fixtures import WineModels
from tests.streamlets.serving import serving_support as s

pytestmark = pytest.mark.integration


class RecordWine(s.classifier_app.WineClassifier):  # type: ignore[name-defined,misc]
    """The wine classifier served record by record (its own postprocess)."""

    def postprocess(self, records: Any, outputs: Any) -> list[dict]:  # type: ignore[type-arg]
        return super().postprocess(records, outputs)  # type: ignore[no-any-return]


def _candidate(
    version: int, data: bytes | None, mode: str, share: float = 0.0, arms: tuple[str, ...] = ()
) -> dict[str, Any]:
    record = s.descriptor(version, "KERAS", data=data)
    record["rollout"] = {"mode": mode, "share": share, "arms": list(arms)}
    return record


def _rows(models: WineModels, n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"w{i}", **{f: float(models.x[i % 178][j]) for j, f in enumerate(s.FEATURES)}}
        | {"label": None}
        for i in range(n)
    ]


def _keys(n: int) -> list[str]:
    return [f"customer-{i}" for i in range(n)]


def _statuses(outputs: list[Any]) -> list[tuple[int, str, str]]:
    return [
        (o.value["version"], o.value["state"], o.value["role"])
        for o in outputs
        if o.outlet == "status"
    ]


def _metrics(h: StreamletHarness) -> dict[tuple[str, str, str], float]:
    """The streamlet's own metrics as its replica exports them: (name, model, role) -> value."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(generate_latest(h.metrics.registry).decode()):
        for sample in family.samples:
            if "model" in sample.labels and sample.name.startswith("streamflow_"):
                name = sample.name.removeprefix("streamflow_")
                found[(name, sample.labels["model"], sample.labels.get("role", ""))] = sample.value
    return found


def _stable(h: StreamletHarness, models: WineModels, version: int = 1) -> None:
    model = models[version]
    h.control("model", s.descriptor(version, "KERAS", data=model.keras_file.read_bytes()))
    assert s.settle(h, version)["state"] == "serving"


def _served(h: StreamletHarness, rows: list[dict[str, Any]], keys: list[str]) -> list[Any]:
    h.feed("in", rows, keys=keys)
    return h.run()


def _harness(tmp_path: Path, cls: type = s.classifier_app.WineClassifier) -> StreamletHarness:
    return StreamletHarness(
        cls, config={**s.CONFIG, "cache_dir": str(tmp_path / "cache")}, schema_paths=[s.SCHEMAS]
    )


@pytest.mark.parametrize("cls", [s.classifier_app.WineClassifier, RecordWine])
def test_a_canary_serves_its_share_of_the_keys_and_every_output_says_its_version(
    wine_models: WineModels, tmp_path: Path, cls: type
) -> None:
    h = _harness(tmp_path, cls)
    _stable(h, wine_models)
    v2 = wine_models.v2.keras_file.read_bytes()
    said = h.control("model", _candidate(2, v2, "CANARY", 30.0))
    assert _statuses(said) == [(2, "loading", "candidate")]
    loaded = s.settle(h, 2)
    assert (loaded["state"], loaded["role"]) == ("serving", "candidate")
    assert "canary 30% of the keys" in loaded["message"] and "resident" in loaded["message"]
    rows, keys = _rows(wine_models, 400), _keys(400)
    out = [o for o in _served(h, rows, keys) if o.outlet == "out"]
    assert [o.key for o in out] == keys  # every record, once, in order
    chosen = candidate_rows(30.0, 2, [k.encode() for k in keys])
    assert 0.2 < chosen.mean() < 0.4
    assert [o.value["model_version"] for o in out] == [2 if c else 1 for c in chosen]
    assert [o.headers["streamflow-model"] for o in out] == [
        "wine:2" if c else "wine:1" for c in chosen
    ]
    # Prometheus says the same: outputs per version, and the candidate's share
    exported = _metrics(h)
    assert exported[("model_outputs_total", "wine:2", "serving")] == chosen.sum()
    assert exported[("model_outputs_total", "wine:1", "serving")] == len(keys) - chosen.sum()
    assert exported[("candidate_share", "wine:2", "")] == 30.0
    # each part is its own model's answer: the same as that model serving alone
    alone = _harness(tmp_path / "alone", cls)
    _stable(alone, wine_models, 2)
    by_v2 = [o for o in _served(alone, rows, keys) if o.outlet == "out"]
    for output, reference, candidate in zip(out, by_v2, chosen, strict=True):
        if candidate:
            assert output.value["probabilities"] == pytest.approx(
                reference.value["probabilities"], abs=1e-6
            )


def test_a_share_change_takes_effect_at_once_with_no_second_load(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = _harness(tmp_path)
    _stable(h, wine_models)
    v2 = wine_models.v2.keras_file.read_bytes()
    h.control("model", _candidate(2, v2, "CANARY", 10.0))
    s.settle(h, 2)
    said = h.control("model", _candidate(2, v2, "CANARY", 60.0))
    assert _statuses(said) == [(2, "serving", "candidate")]  # no "loading": no load
    assert said[0].value["message"] == "canary 60% of the keys"
    keys = _keys(300)
    out = [o for o in _served(h, _rows(wine_models, 300), keys) if o.outlet == "out"]
    chosen = candidate_rows(60.0, 2, [k.encode() for k in keys])
    assert [o.value["model_version"] for o in out] == [2 if c else 1 for c in chosen]
    assert (chosen >= candidate_rows(10.0, 2, [k.encode() for k in keys])).all()


def test_a_shadow_leaves_the_stable_outputs_as_they_were_and_writes_the_candidates_beside(
    wine_models: WineModels, tmp_path: Path
) -> None:
    rows, keys = _rows(wine_models, 120), _keys(120)
    plain = _harness(tmp_path / "plain")
    _stable(plain, wine_models)
    without = _served(plain, rows, keys)
    h = _harness(tmp_path / "shadowed")
    _stable(h, wine_models)
    h.control("model", _candidate(2, wine_models.v2.keras_file.read_bytes(), "SHADOW"))
    assert "shadow of every record" in s.settle(h, 2)["message"]
    shadowed = _served(h, rows, keys)

    def comparable(outputs: list[Any], outlet: str) -> list[Any]:
        return [
            (o.key, {k: v for k, v in o.value.items() if k != "latency_ms"}, dict(o.headers))
            for o in outputs
            if o.outlet == outlet
        ]

    assert comparable(shadowed, "out") == comparable(without, "out")
    shadow = [o for o in shadowed if o.outlet == "shadow"]
    assert [o.key for o in shadow] == keys
    assert {o.value["model_version"] for o in shadow} == {2}
    assert {o.headers["streamflow-model"] for o in shadow} == {"wine:2"}
    exported = _metrics(h)
    assert exported[("model_outputs_total", "wine:2", "shadow")] == len(keys)
    assert exported[("model_outputs_total", "wine:1", "serving")] == len(keys)
    assert exported[("candidate_share", "wine:2", "")] == 100.0


def test_promoting_the_candidate_serves_it_to_every_key_without_loading_it_again(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = _harness(tmp_path)
    _stable(h, wine_models)
    v2 = wine_models.v2.keras_file.read_bytes()
    h.control("model", _candidate(2, v2, "CANARY", 5.0))
    s.settle(h, 2)
    said = h.control("model", s.descriptor(2, "KERAS", data=v2))
    assert _statuses(said) == [(2, "serving", "stable")]
    assert said[0].value["message"].startswith("promoted from candidate")
    out = [o for o in _served(h, _rows(wine_models, 50), _keys(50)) if o.outlet == "out"]
    assert len(out) == 50 and {o.value["model_version"] for o in out} == {2}
    # the candidate's end, written after the promotion, changes nothing, and says so
    (ended,) = h.control("model", _candidate(2, None, "END"))
    assert (ended.value["state"], ended.value["role"]) == ("retired", "candidate")
    assert "had no such candidate loaded" in ended.value["message"]
    out = [o for o in _served(h, _rows(wine_models, 20), _keys(20)) if o.outlet == "out"]
    assert {o.value["model_version"] for o in out} == {2}


def test_ending_the_rollout_rolls_back_to_the_stable_version(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = _harness(tmp_path)
    _stable(h, wine_models)
    h.control("model", _candidate(2, wine_models.v2.keras_file.read_bytes(), "CANARY", 50.0))
    s.settle(h, 2)
    _served(h, _rows(wine_models, 10), _keys(10))
    assert _metrics(h)[("candidate_share", "wine:2", "")] == 50.0
    # what `streamflow status` shows in its model column
    assert h.state["model"] == "wine:1 + candidate wine:2 (canary 50% of the keys)"
    said = h.control("model", _candidate(2, None, "END"))
    assert h.state["model"] == "wine:1"
    assert _statuses(said) == [(2, "retired", "candidate")]
    assert "rolled back" in said[0].value["message"]
    out = [o for o in _served(h, _rows(wine_models, 60), _keys(60)) if o.outlet == "out"]
    assert len(out) == 60 and {o.value["model_version"] for o in out} == {1}
    assert _metrics(h)[("candidate_share", "wine:2", "")] == 0.0  # it meets no record now


def test_an_ab_rollout_names_each_outputs_arm(wine_models: WineModels, tmp_path: Path) -> None:
    h = _harness(tmp_path)
    _stable(h, wine_models)
    v2 = wine_models.v2.keras_file.read_bytes()
    h.control("model", _candidate(2, v2, "AB", 50.0, ("control", "treatment")))
    s.settle(h, 2)
    keys = _keys(100)
    out = [o for o in _served(h, _rows(wine_models, 100), keys) if o.outlet == "out"]
    chosen = candidate_rows(50.0, 2, [k.encode() for k in keys])
    assert [o.headers["streamflow-arm"] for o in out] == [
        "treatment" if c else "control" for c in chosen
    ]


def test_hostile_rollouts_are_refused_saying_why_and_the_stable_model_serves_on(
    wine_models: WineModels, tmp_path: Path
) -> None:
    v2 = wine_models.v2.keras_file.read_bytes()
    h = _harness(tmp_path)
    _stable(h, wine_models)
    refused = {
        "out of range": _candidate(2, v2, "CANARY", 150.0),
        "names two arms": _candidate(2, v2, "AB", 50.0, ("only",)),
        "not newer than the stable version 1": _candidate(1, v2, "CANARY", 5.0),
        "needs its sha256": {**_candidate(2, None, "CANARY", 5.0), "location": "https://x.test/m"},
    }
    for why, record in refused.items():
        (status,) = h.control("model", record)
        assert (status.value["state"], status.value["role"]) == ("rejected", "candidate")
        assert why in status.value["message"], status.value["message"]
    h.control("model", _candidate(3, v2, "CANARY", 5.0))
    s.settle(h, 3)
    (other,) = h.control("model", _candidate(3, wine_models.v1.keras_file.read_bytes(), "CANARY"))
    assert "already the candidate, with another artifact" in other.value["message"]
    (older,) = h.control("model", _candidate(2, v2, "CANARY", 5.0))
    assert "older than the candidate 3" in older.value["message"]
    out = [o for o in _served(h, _rows(wine_models, 40), _keys(40)) if o.outlet == "out"]
    assert len(out) == 40  # nothing lost; the candidate 3 still serves its 5%
    assert {o.value["model_version"] for o in out} <= {1, 3}


def test_a_candidate_replayed_before_its_stable_version_waits_for_it_then_serves(
    wine_models: WineModels, tmp_path: Path
) -> None:
    # a compacted control topic whose stable record was written again after the candidate
    # (a publisher at start-up): a replica starting now reads the candidate first
    h = _harness(tmp_path)
    v2 = wine_models.v2.keras_file.read_bytes()
    (held,) = h.control("model", _candidate(2, v2, "CANARY", 50.0))
    assert (held.value["state"], held.value["role"]) == ("loading", "candidate")
    assert "held until a stable version arrives" in held.value["message"]
    said = h.control("model", s.descriptor(1, "KERAS", data=wine_models.v1.keras_file.read_bytes()))
    assert _statuses(said) == [(1, "loading", "stable"), (2, "loading", "candidate")]
    serving: set[tuple[int, str, str]] = set()
    while len(serving) < 2:  # both loads end between batches, in either order
        serving |= {st for st in _statuses(h.between_batches()) if st[1] == "serving"}
    assert serving == {(1, "serving", "stable"), (2, "serving", "candidate")}
    keys = _keys(100)
    out = [o for o in _served(h, _rows(wine_models, 100), keys) if o.outlet == "out"]
    chosen = candidate_rows(50.0, 2, [k.encode() for k in keys])
    assert [o.value["model_version"] for o in out] == [2 if c else 1 for c in chosen]


@pytest.mark.parametrize("mode", ["CANARY", "SHADOW"])
@pytest.mark.parametrize("cls", [s.classifier_app.WineClassifier, RecordWine])
def test_a_candidate_that_fails_leaves_every_record_to_the_stable_model(
    wine_models: WineModels, tmp_path: Path, mode: str, cls: type
) -> None:
    h = _harness(tmp_path, cls)
    _stable(h, wine_models)
    h.control("model", _candidate(2, wine_models.v2.keras_file.read_bytes(), mode, 50.0))
    s.settle(h, 2)

    async def broken(inputs: Any) -> Any:
        raise RuntimeError("the candidate's server went away")

    h.streamlet.candidates.current.predictor.infer = broken  # type: ignore[attr-defined]
    served = _served(h, _rows(wine_models, 80), _keys(80))
    out = [o for o in served if o.outlet == "out"]
    assert len(out) == 80 and {o.value["model_version"] for o in out} == {1}
    assert not [o for o in served if o.outlet == "shadow"]
    assert not h.dead_letters
    # each record the candidate was to meet says it failed it (the evidence counts them)
    fell = [o.key for o in out if o.headers.get("streamflow-fallback") == "wine:2"]
    meant = candidate_rows(50.0, 2, [k.encode() for k in _keys(80)])
    expected = [k for k, mine in zip(_keys(80), meant, strict=True) if mine or mode == "SHADOW"]
    assert fell == expected and 0 < len(fell) <= 80


def test_a_newer_stable_version_retires_the_candidate(
    wine_models: WineModels, tmp_path: Path
) -> None:
    h = _harness(tmp_path)
    _stable(h, wine_models)
    v2 = wine_models.v2.keras_file.read_bytes()
    h.control("model", _candidate(2, v2, "SHADOW"))
    s.settle(h, 2)
    said = h.control("model", s.descriptor(3, "KERAS", data=v2))
    assert _statuses(said) == [(3, "loading", "stable"), (2, "retired", "candidate")]
    s.settle(h, 3)
    served = _served(h, _rows(wine_models, 20), _keys(20))
    assert not [o for o in served if o.outlet == "shadow"]
    assert {o.value["model_version"] for o in served if o.outlet == "out"} == {3}


class _Picky:
    """A candidate's mapping that refuses the wines whose id ends in 7 (as a candidate
    with inputs of its own would refuse records that do not fit them)."""

    def __init__(self, mapping: Any) -> None:
        self._mapping = mapping

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mapping, name)

    def encode_columns(self, columns: Any) -> None:
        return None  # record by record, so that some can be refused

    def encode(self, values: Any) -> Any:
        from streamflow.models.tensor_specs import RecordErrors

        refused = {i: "not for me" for i, v in enumerate(values) if v["id"].endswith("7")}
        if refused:
            raise RecordErrors(refused)
        return self._mapping.encode(values)


@pytest.mark.parametrize("mode", ["CANARY", "SHADOW"])
@pytest.mark.parametrize("cls", [s.classifier_app.WineClassifier, RecordWine])
def test_records_a_candidate_refuses_are_served_by_the_stable_model_not_dead_lettered(
    wine_models: WineModels, tmp_path: Path, cls: type, mode: str
) -> None:
    h = _harness(tmp_path, cls)
    _stable(h, wine_models)
    h.control("model", _candidate(2, wine_models.v2.keras_file.read_bytes(), mode, 100.0))
    s.settle(h, 2)
    current = h.streamlet.candidates.current  # type: ignore[attr-defined]
    object.__setattr__(current, "mapping", _Picky(current.mapping))
    outputs = _served(h, _rows(wine_models, 60), _keys(60))
    served = [o for o in outputs if o.outlet == "out"]
    assert not h.dead_letters
    assert len(served) == 60
    by_id = {o.value["id"]: o for o in served}
    canary = mode == "CANARY"
    for wine_id, out in by_id.items():
        refused = wine_id.endswith("7")
        assert out.value["model_version"] == (1 if refused or not canary else 2), wine_id
        assert (out.headers.get("streamflow-fallback") == "wine:2") is refused, wine_id
    shadowed = {o.value["id"] for o in outputs if o.outlet == "shadow"}
    assert shadowed == (set() if canary else {i for i in by_id if not i.endswith("7")})
