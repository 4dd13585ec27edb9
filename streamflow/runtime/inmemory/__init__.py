"""Kafka in memory: the consumer and producer the runtime's loops take, without a broker.

The testkit drives the real :class:`~streamflow.runtime.processor.Processor`
(and the source and serve runners) through these, so there is one
implementation of calling logic, routing outputs, dead-lettering and
backpressure; the runtime's own unit tests use them to pin down delivery
tickets, the offset gate and transactions one behaviour at a time.

They speak the subset of confluent-kafka's ``Consumer`` and ``Producer`` that
the runtime calls, with librdkafka's semantics where the runtime depends on
them:

* records are real :class:`confluent_kafka.Message` objects;
* a delivery callback runs only inside ``poll`` or ``flush``, never inside
  ``produce``; a test may hold acknowledgements back (:meth:`MemoryProducer.hold`)
  or fail the next ones (:meth:`MemoryProducer.fail_next`), and a full queue
  raises ``BufferError`` (``queue_limit``);
* a transaction's records and offsets become visible together on commit and
  vanish on abort; a test may make the next transactional call raise;
* ``consume`` honours ``pause``/``resume`` and ``seek``, and the subscription's
  ``on_assign`` runs on the first ``consume``; :meth:`MemoryConsumer.revoke`
  plays a rebalance that takes partitions away, and :meth:`MemoryConsumer.give_back`
  one that returns them;
* a partition paused when a rebalance takes it is still paused when a later one
  gives it back, as librdkafka keeps it under a subscription (cooperative-sticky);
  only ``assign``, outside a group, starts it unpaused.

Everything runs on the caller's thread (the serve runner's poller thread only
calls ``poll``); nothing waits on a clock, except that an idle ``poll(timeout)``
(or a ``flush(timeout)`` of held records) naps for a few milliseconds, so that a
poller thread, or a flush in slices, does not spin.
"""

from __future__ import annotations

from streamflow.runtime.inmemory.broker import MemoryBroker, MemoryChangelog
from streamflow.runtime.inmemory.consumer import MemoryConsumer
from streamflow.runtime.inmemory.producer import MemoryProducer

__all__ = ["MemoryBroker", "MemoryChangelog", "MemoryConsumer", "MemoryProducer"]
