"""``streamflow verify`` checks a tensor mapping against the port schemas, at the value's line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from streamflow.cli.main import app

HERE = Path(__file__).parent

BLUEPRINT = """\
name: tensors
python_paths: [{here}]
schemas: [{here}/schemas]
streamlets:
  model:
    class: tensor_apps:MixedServing
    config:
      inputs:
        features: {{field: features, dtype: float32, shape: [4]}}
        region: {{field: {region}, dtype: int64}}
      outputs:
        probabilities: {{field: predicted, transform: {transform}, labels: [a, b, c]}}
topics:
  data: {{producers: [], consumers: [model.in]}}
  out: {{producers: [model.out]}}
  models: {{producers: [], consumers: [model.model], config: {{cleanup.policy: compact}}}}
"""


def _verify(tmp_path: Path, **values: str) -> tuple[int, list[dict[str, object]]]:
    path = tmp_path / "blueprint.yaml"
    settings = {"region": "region", "transform": "argmax", **values}
    path.write_text(BLUEPRINT.format(here=HERE, **settings))
    result = CliRunner().invoke(app, ["verify", str(path), "-o", "json"])
    assert "Traceback" not in result.output
    body = json.loads(result.stdout)
    problems = [p for p in body["problems"] if p["severity"] == "error"]
    return result.exit_code, problems


def test_a_mapping_that_fits_verifies(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path)
    assert (code, problems) == (0, [])


def test_a_field_the_schema_lacks_is_located_at_the_mapping(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path, region="zone")
    assert code == 1
    (problem,) = problems
    assert problem["code"] == "unknown-tensor-field"
    assert "'zone'" in str(problem["message"]) and "region" in str(problem["hint"])
    assert (problem["line"], problem["column"]) == (10, 25)  # region's field: zone


def test_a_field_of_the_wrong_avro_type_is_located_at_the_mapping(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path, transform="top_k")  # predicted is a string
    assert code == 1
    (problem,) = problems
    assert problem["code"] == "tensor-field-type"
    assert "top_k writes" in str(problem["message"])
    assert (problem["line"], problem["column"]) == (12, 32)  # probabilities' field


def test_a_malformed_mapping_is_an_invalid_config_value(tmp_path: Path) -> None:
    code, problems = _verify(tmp_path, transform="softmax")
    assert code == 1
    (problem,) = problems
    assert problem["code"] == "invalid-config-value"
    assert "transform 'softmax' is not one of raw, argmax, top_k, threshold" in str(
        problem["message"]
    )


def test_a_problem_in_a_mapping_given_with_set_is_placed_at_the_command_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "blueprint.yaml"
    path.write_text(BLUEPRINT.format(here=HERE, region="region", transform="argmax"))
    override = '{"features": {"field": "features", "shape": [4]}, "region": "zone"}'
    result = CliRunner().invoke(
        app, ["verify", str(path), "-o", "json", "--set", f"model.inputs={override}"]
    )
    problems = [p for p in json.loads(result.stdout)["problems"] if p["severity"] == "error"]
    assert [(p["code"], p["file"]) for p in problems] == [("unknown-tensor-field", "<--set>")]
