"""The model kinds and states (`streamflow.models.kinds`) are the built-in schemas' own."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro

import streamflow
from streamflow.models import kinds as models
from streamflow.models.kinds import ModelKind, ModelState

ML = Path(streamflow.__file__).parent / "schema" / "builtin" / "streamflow" / "ml"


def _symbols(schema: str, field: str) -> list[str]:
    doc = json.loads((ML / f"{schema}.avsc").read_text())
    (found,) = [f["type"] for f in doc["fields"] if f["name"] == field]
    return list(found["symbols"])


def test_the_kinds_are_the_descriptors_symbols_and_the_states_the_statuss() -> None:
    assert [k.value for k in ModelKind] == _symbols("ModelDescriptor", "kind")
    assert [s.value for s in ModelState] == _symbols("ModelStatus", "state")


def test_every_kind_is_embedded_or_remote_and_named_by_one_option() -> None:
    assert set(ModelKind) == models.EMBEDDED_KINDS | models.REMOTE_KINDS
    assert not models.EMBEDDED_KINDS & models.REMOTE_KINDS
    assert set(models.ARTIFACT_OPTIONS.values()) == models.EMBEDDED_KINDS
    assert set(models.PROTOCOLS.values()) == models.REMOTE_KINDS
    assert models.TROUBLE_STATES < models.FINAL_STATES
    assert ModelState.LOADING not in models.FINAL_STATES


def test_a_member_writes_as_its_symbol_and_a_symbol_read_is_its_member() -> None:
    doc = json.loads((ML / "ModelStatus.avsc").read_text())
    enum_type = next(f["type"] for f in doc["fields"] if f["name"] == "state")
    schema = fastavro.parse_schema(
        {"type": "record", "name": "S", "fields": [{"name": "state", "type": enum_type}]}
    )
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {"state": ModelState.SUPERSEDED})
    out.seek(0)
    read = fastavro.schemaless_reader(out, schema)
    assert read == {"state": "superseded"} and read["state"] == ModelState.SUPERSEDED
    assert json.dumps({"kind": ModelKind.ONNX}) == '{"kind": "ONNX"}'
