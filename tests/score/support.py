"""What the score tests share: a wine-classifier blueprint of their own, and the CLI's env."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from tests.model_fixtures import WineModels

ROOT = Path(__file__).resolve().parents[2]
FEATURES = [
    "alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
    "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
    "od280_od315_of_diluted_wines", "proline",
]  # fmt: skip


def blueprint(tmp_path: Path, models: WineModels, *, lineage: bool = True) -> Path:
    tag = uuid.uuid4().hex[:8]
    config = {
        "name": f"wine-score-{tag}",
        "python_paths": [str(ROOT / "blueprints" / "wine")],
        "schemas": [str(ROOT / "schemas")],
        "streamlets": {
            "samples": {
                "class": "classifier_app:WineFeed",
                "config": {"dataset": str(models.samples), "rate": 50, "loop": True},
            },
            "models": {
                "class": "streamflow.streamlets.serving:ModelPublisher",
                "config": {"name": "wine", "version": 1, "keras": str(models.v1.keras_file)},
            },
            "classifier": {
                "class": "classifier_app:WineClassifier",
                "replicas": 2,
                "config": {
                    "input_fields": FEATURES,
                    "output_field": "probabilities",
                    "class_field": "predicted",
                },
            },
        },
        "topics": {
            f"features-{tag}": {
                "producers": ["samples.out"],
                "consumers": ["classifier.in"],
                "partitions": 4,
            },
            f"models-{tag}": {
                "producers": ["models.out"],
                "consumers": ["classifier.model"],
                "config": {"cleanup.policy": "compact"},
            },
            f"predictions-{tag}": {"producers": ["classifier.out"], "partitions": 4},
            f"status-{tag}": {"producers": ["classifier.status"]},
        },
    }
    if not lineage:
        config["streamlets"]["classifier"]["lineage"] = False  # type: ignore[index]
    path = tmp_path / "wine-score.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: its own state folder, Kafka only from -b."""
    env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_KAFKA_BOOTSTRAP"}
    env.update(STREAMFLOW_HOME=str(tmp_path / "home"), NO_COLOR="1", TF_CPP_MIN_LOG_LEVEL="2")
    return env
