"""The monitored wine example as a user meets it: it verifies, and its generator drifts."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from streamflow.cli.main import app
from streamflow.testkit import StreamletHarness
from tests.streamlets.serving import serving_support as s

MONITORED = s.WINE / "monitored.yaml"


def test_the_monitored_blueprint_verifies() -> None:
    result = CliRunner().invoke(app, ["verify", str(MONITORED)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "✓ wine-monitored: 8 streamlets, 10 topics, 0 problems"


def test_the_generator_shifts_the_chosen_features_after_drift_after(tmp_path: Path) -> None:
    import monitoring_app

    dataset = tmp_path / "wines.jsonl"
    row = '{"id": "w", ' + ", ".join(f'"{f}": 1.0' for f in s.FEATURES) + ', "label": 0}\n'
    dataset.write_text(row * 10)
    config = {"dataset": str(dataset), "drift_after": 4, "drift_features": ["alcohol", "proline"]}
    with StreamletHarness(
        monitoring_app.DriftingWineFeed, config=config, schema_paths=[s.SCHEMAS]
    ) as h:
        values = [o.value for o in h.run_source(limit=10)]
    assert [v["alcohol"] for v in values] == [1.0] * 4 + [1.3] * 6
    assert [v["proline"] for v in values] == [1.0] * 4 + [1.3] * 6
    assert {v["ash"] for v in values} == {1.0}
