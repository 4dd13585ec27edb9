"""The embedded development Kafka: real records, transactions, restarts, and helpful errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from streamflow import devkit
from streamflow.devkit import DevkitError, KafkaBroker, kafka
from tests.devkit.port_support import first_port_taken


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0, "records still unacknowledged after 30 s"


def consume_all(
    bootstrap: str,
    topic: str,
    *,
    count: int,
    timeout: float = 30,
    committed_only: bool = False,
    group: bool = False,
) -> list[bytes]:
    """Read `count` records from the start of `topic`'s partition 0, or give up after `timeout`.

    With `group`, subscribe through a consumer group (the first join on a fresh broker
    takes ~3 s while it creates __consumer_offsets); otherwise assign the partition.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    if group:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            values.extend(_value(message) for message in consumer.consume(count, timeout=0.5))
    finally:
        consumer.close()
    return values


def _value(message: Message) -> bytes:
    if error := message.error():
        raise AssertionError(f"consume failed: {error}")
    value = message.value()
    assert isinstance(value, bytes)
    return value


def test_a_record_goes_through_the_shared_broker_and_a_consumer_group(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("roundtrip")

    produce(kafka_bootstrap, topic, [b"hello"])

    assert consume_all(kafka_bootstrap, topic, count=1, group=True) == [b"hello"]


def test_read_committed_sees_committed_transactions_only(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("transactions")
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    assert producer.flush(30) == 0  # written to the log, so the abort has something to hide
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)

    assert consume_all(kafka_bootstrap, topic, count=1, committed_only=True) == [b"committed"]
    assert consume_all(kafka_bootstrap, topic, count=2, timeout=3) == [b"aborted", b"committed"]


@pytest.mark.parametrize("hard", [False, True], ids=["graceful", "crash"])
def test_restart_keeps_address_and_data(kafka_broker: KafkaBroker, hard: bool) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"restart-{uuid.uuid4().hex[:12]}"
    devkit.create_topic(bootstrap_servers=bootstrap, name=topic)
    produce(bootstrap, topic, [b"before"])

    kafka_broker.restart(hard=hard)

    assert kafka_broker.bootstrap_servers == bootstrap
    produce(bootstrap, topic, [b"after"])
    assert consume_all(bootstrap, topic, count=2) == [b"before", b"after"]


def test_stop_is_idempotent_and_removes_the_work_dir() -> None:
    broker = KafkaBroker()
    broker.start()
    work_dir = broker.work_dir
    assert work_dir is not None and (work_dir / "server.properties").is_file()

    broker.stop()
    broker.stop()

    assert not broker.is_running
    assert not work_dir.exists()


def _maps(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` mapped into its memory."""
    return str(path) in Path(f"/proc/{pid}/maps").read_text()


def test_brokers_start_from_a_class_archive_that_the_first_clean_stop_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JVM killed while it writes its archive leaves none (nor a part of one); the next
    broker to stop by itself leaves a whole one, which every later broker maps."""
    lib = devkit.find_kafka_lib()  # before the cache moves
    monkeypatch.setenv("STREAMFLOW_CACHE_DIR", str(tmp_path / "cache"))
    archives = tmp_path / "cache" / "jvm"
    broker = KafkaBroker(lib_dir=lib)
    try:
        broker.start()
        broker.kill()
        assert list(archives.iterdir()) == []
        broker.start()  # records again: there is still no archive
        broker.stop()
        [archive] = archives.iterdir()
        assert archive.suffix == ".jsa" and archive.stat().st_size > 1_000_000

        broker = KafkaBroker(lib_dir=lib)
        broker.start()
        assert broker._process is not None and _maps(broker._process.pid, archive)
        devkit.create_topic(bootstrap_servers=broker.bootstrap_servers, name="t")
        produce(broker.bootstrap_servers, "t", [b"works"])
    finally:
        broker.stop()
    assert list(archives.iterdir()) == [archive]


def test_a_broker_that_answers_but_gives_no_producer_id_is_started_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in CI: a fresh broker answered metadata, but producers and groups waited on
    "Coordinator load in progress" for a minute. Such a broker is found at start."""
    asked: list[str] = []
    real = kafka._hands_out_producer_ids

    def first_not(bootstrap: str, *, within: float) -> bool:
        asked.append(bootstrap)
        return len(asked) > 1 and real(bootstrap, within=within)

    monkeypatch.setattr(kafka, "_hands_out_producer_ids", first_not)
    broker = KafkaBroker()
    try:
        broker.start()
        assert len(asked) == 2 and asked[0] == asked[1] == broker.bootstrap_servers
        assert broker.work_dir is not None
        said = (broker.work_dir / "jvm.out").read_text()
        assert "gave no producer id within 15 s of answering metadata; starting it again" in said
        topic = f"again-{uuid.uuid4().hex[:12]}"
        devkit.create_topic(bootstrap_servers=broker.bootstrap_servers, name=topic)
        produce(broker.bootstrap_servers, topic, [b"after"])
        assert consume_all(broker.bootstrap_servers, topic, count=1) == [b"after"]
    finally:
        broker.stop()


def test_a_broker_that_never_gives_a_producer_id_fails_its_start_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka, "_hands_out_producer_ids", lambda _bootstrap, *, within: False)
    broker = KafkaBroker()
    with pytest.raises(DevkitError, match="started but gave no producer id") as error:
        broker.start()
    broker.stop()
    assert "starting it again" in str(error.value)  # the first try, quoted from jvm.out
    assert not broker.is_running


def test_a_missing_lib_dir_says_how_to_fetch_the_jars(tmp_path: Path) -> None:
    with pytest.raises(DevkitError, match="tools/fetch-kafka") as error:
        KafkaBroker(lib_dir=tmp_path / "nowhere").start()
    assert str(tmp_path / "nowhere") in str(error.value)


def test_a_lib_dir_without_kafka_jars_is_named(tmp_path: Path) -> None:
    with pytest.raises(DevkitError, match="no Kafka broker jar"):
        KafkaBroker(lib_dir=tmp_path).start()


def test_a_missing_java_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))

    with pytest.raises(DevkitError, match="JAVA_HOME"):
        KafkaBroker().start()


def test_a_bad_setting_fails_fast_and_quotes_kafka() -> None:
    broker = KafkaBroker(overrides={"num.io.threads": "not-a-number"})

    with pytest.raises(DevkitError, match=r"Invalid value not-a-number .* num\.io\.threads"):
        broker.start(timeout=30)
    broker.stop()


def test_a_broker_that_dies_while_starting_is_reported_with_its_output() -> None:
    broker = KafkaBroker(jvm_options=["-XX:+StreamflowNoSuchOption"])

    with pytest.raises(DevkitError, match="exited with code") as error:
        broker.start(timeout=30)
    broker.stop()

    assert "StreamflowNoSuchOption" in str(error.value)
    assert not broker.is_running


def test_a_port_taken_before_the_broker_binds_it_is_picked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in CI: a port found free was bound by someone else before Kafka bound it
    ("Address already in use"), the JVM exited, and every test of that worker failed
    its set-up. A broker that picked its own ports is started once more, on new ones."""
    broker = KafkaBroker()
    try:
        with first_port_taken(monkeypatch, "127.0.0.1") as (taken, picked):
            broker.start()
        assert len(picked) == 2 and picked[0][0] == taken
        assert broker.bootstrap_servers.endswith(f":{picked[1][0]}")
        assert broker.work_dir is not None
        said = "".join(
            (broker.work_dir / name).read_text(errors="replace")
            for name in ("jvm.out", "broker.log")
        )
        assert "Address already in use" in said and "a port was taken" in said
        topic = f"moved-{uuid.uuid4().hex[:12]}"
        devkit.create_topic(bootstrap_servers=broker.bootstrap_servers, name=topic)
        produce(broker.bootstrap_servers, topic, [b"on new ports"])
        assert consume_all(broker.bootstrap_servers, topic, count=1) == [b"on new ports"]
    finally:
        broker.stop()
