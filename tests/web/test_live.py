"""The watcher, with a fake target: what the page says when the target refuses Kafka."""

from __future__ import annotations

from streamflow.blueprint.graph import Edge, Graph, StreamletNode, TopicNode
from streamflow.blueprint.model import Application
from streamflow.operator import targets
from streamflow.operator.web import live, snapshot

APP = Application.from_dict(
    {
        "name": "demo",
        "streamlets": {"drift": {"class": "not_importable_here:Drift"}},
        "topics": {"reports": {"producers": ["drift.reports"]}},
    }
)
# as the graph is where the classes can be imported: the topic carries DriftReports
GRAPH = Graph(
    app="demo",
    streamlets=(StreamletNode("drift", "not_importable_here:Drift", "fan-out", 1),),
    topics=(TopicNode("reports", 1, 1, True, False),),
    edges=(Edge("drift", "reports", "reports", snapshot.DRIFT_REPORT, "produce"),),
)


class RefusingTarget:
    kind = "kubernetes"
    asked = 0

    def application(self, name: str) -> Application:
        return APP

    def status(self, name: str) -> targets.AppStatus:
        streamlet = targets.StreamletStatus("drift", desired=1, ready=1, running=1)
        return targets.AppStatus(name, "kubernetes", "Running", "", True, (streamlet,), "k:9092")

    def kafka_client_config(self, name: str) -> dict[str, str]:
        self.asked += 1
        raise targets.TargetError(
            f"no Kafka client is made for {name!r}: security.protocol is set in the spec",
            hint="see `streamflow status demo --target kubernetes`",
        )


def test_refused_kafka_settings_are_said_in_the_drift_panel_and_not_asked_each_poll() -> None:
    target = RefusingTarget()
    watcher = live.Watcher(target=target, app=APP, interval=0.05)  # type: ignore[arg-type]
    watcher.graph = GRAPH
    watcher.start()
    try:
        seq, data = watcher.latest(timeout=5)
        seq, data = watcher.latest(after=seq + 3, timeout=5)  # a few polls later
    finally:
        watcher.stop()
    assert data is not None
    assert data["records_problem"] == (
        "cannot read the report topics: no Kafka client is made for 'demo': "
        "security.protocol is set in the spec (see `streamflow status demo --target kubernetes`)"
    )
    assert target.asked == 1
