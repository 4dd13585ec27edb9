"""The application graph, rendered as text, Mermaid and DOT."""

from __future__ import annotations

import pytest

from streamflow.blueprint import (
    Application,
    build_graph,
    load_application,
    to_dot,
    to_mermaid,
    to_text,
)
from streamflow.blueprint import graph as graphs
from tests.blueprint.bp_helpers import EXAMPLE, verify


@pytest.fixture(scope="module")
def wine() -> Application:
    return load_application(EXAMPLE)


@pytest.fixture(scope="module")
def controlled() -> Application:
    result = verify(
        """
        name: ctl-app
        schemas: [schemas]
        streamlets:
          source:
            class: bp_fixture_streamlets:Source
          ctl:
            class: bp_fixture_streamlets:Controlled
        topics:
          readings.v1:
            producers: [source.out]
            consumers: [ctl.in]
          models:
            consumers: [ctl.model]
            config: {cleanup.policy: compact}
            managed: false
        """
    )
    assert result.application is not None, result.problems
    return result.application


def test_graph_model(wine: Application) -> None:
    built = build_graph(wine)
    assert [(s.name, s.shape, s.replicas) for s in built.streamlets] == [
        ("source", "ingress", 1),
        ("scorer", "processor", 2),
        ("logger", "egress", 1),
    ]
    assert [(e.streamlet, e.port, e.topic, e.direction) for e in built.edges] == [
        ("source", "out", "wine-samples", "produce"),
        ("scorer", "in", "wine-samples", "consume"),
        ("scorer", "out", "wine-scores", "produce"),
        ("logger", "in", "wine-scores", "consume"),
    ]


def test_text_shows_streamlets_topics_and_flows(wine: Application) -> None:
    text = to_text(build_graph(wine))
    assert text.startswith("wine-quality: 3 streamlets, 2 topics\n")
    assert "scorer  processor  2 replicas  wine_app:QualityScorer" in text
    assert "wine-samples  4 partitions, replication 1" in text
    assert (
        "source.out ─[examples.wine.WineSample]─▶ wine-samples "
        "─[examples.wine.WineSample]─▶ scorer.in"
    ) in text
    assert "scorer.out ─[examples.wine.WineScore]─▶ wine-scores" in text


def test_text_marks_control_inlets_and_outside_producers(controlled: Application) -> None:
    text = to_text(build_graph(controlled))
    assert "(outside) ──▶ models ─[streamflow.ml.ModelDescriptor]─▶ ctl.model (control)" in text
    assert "1 partition, replication 1, compacted, external" in text


def test_mermaid(wine: Application) -> None:
    text = to_mermaid(build_graph(wine))
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    assert '    s_scorer("scorer<br/>processor, 2 replicas")' in lines
    assert '    t_wine_samples[("wine-samples<br/>4 partitions, replication 1")]' in lines
    assert '    s_source -->|"out: examples.wine.WineSample"| t_wine_samples' in lines
    assert '    t_wine_samples -->|"in: examples.wine.WineSample"| s_scorer' in lines


def test_mermaid_ids_are_safe_and_control_edges_dotted(controlled: Application) -> None:
    text = to_mermaid(build_graph(controlled))
    assert "t_readings_v1[(" in text
    assert 't_models -.->|"model: streamflow.ml.ModelDescriptor"| s_ctl' in text


def test_dot(wine: Application) -> None:
    text = to_dot(build_graph(wine))
    assert text.startswith('digraph "wine-quality" {\n    rankdir=LR;')
    assert text.rstrip().endswith("}")
    assert (
        '"streamlet:scorer" [shape=box, style=rounded, '
        'label="scorer\\nprocessor, 2 replicas\\nwine_app:QualityScorer"];'
    ) in text
    assert '"topic:wine-scores" [shape=cylinder, label="wine-scores\\n1 partition' in text
    assert (
        '"streamlet:source" -> "topic:wine-samples" [label="out\\nexamples.wine.WineSample"];'
    ) in text


def test_dot_control_edges_are_dashed(controlled: Application) -> None:
    text = to_dot(build_graph(controlled))
    edge = '"topic:models" -> "streamlet:ctl" [label="model\\nstreamflow.ml.ModelDescriptor"'
    assert f"{edge}, style=dashed];" in text


def test_render_by_format_name(wine: Application) -> None:
    assert graphs.render(wine, fmt="dot").startswith("digraph")
    assert graphs.render(wine).startswith("wine-quality:")
    with pytest.raises(ValueError, match="unknown graph format"):
        graphs.render(wine, fmt="svg")
