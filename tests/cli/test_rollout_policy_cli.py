"""`streamflow model rollout start --policy FILE`: refused before anything is written."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from streamflow.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
BLUEPRINT = ROOT / "blueprints" / "wine" / "rollout.yaml"
GOOD = "steps:\n  - {mode: shadow}\n  - {mode: canary, share: 20}\nmax_labels: 100\n"


def _start(tmp_path: Path, policy: str, *extra: str) -> tuple[int, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    model = tmp_path / "model.keras"
    model.write_bytes(b"not read: the policy is refused first")
    result = CliRunner().invoke(
        app,
        ["model", "rollout", "start", str(BLUEPRINT), "classifier", "--keras", str(model),
         "--policy", str(path), "-b", "127.0.0.1:1", *extra],
    )  # fmt: skip
    return result.exit_code, result.output


def test_a_policy_that_cannot_run_is_a_usage_error_naming_the_field(tmp_path: Path) -> None:
    code, said = _start(tmp_path, "steps:\n  - {mode: canary, share: 20, windws: 2}\n")
    assert code == 2 and "step 1 has no field windws" in said, said
    code, said = _start(tmp_path, "steps:\n  - {mode: canary, share: 20}\n")
    assert code == 2 and "never ends" in said, said
    code, said = _start(tmp_path, "steps: [\n")
    assert code == 2 and "cannot read it" in said, said


def test_a_start_off_the_policys_steps_is_refused(tmp_path: Path) -> None:
    code, said = _start(tmp_path, GOOD, "--mode", "canary", "--share", "33")
    assert code == 2, said
    assert "--mode canary --share 33 is not a step of the policy (shadow, canary 20)" in said
