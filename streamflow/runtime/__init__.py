"""One replica of one streamlet against Kafka.

The entry point is :func:`~streamflow.runtime.replica.run_replica`. Around it:
the client factory seam (``clients``), delivery guarantees (``delivery``, and
``transactions`` for exactly-once, its calls watched by ``watchdog``), the data
loop (``processor``), control inlets (``control``), ingress loops (``source``,
``serve``), a stop bounded whatever Kafka does (``shutdown``), dead letters
(``dlq``), topics (``topics``), and the health and metrics endpoints
(``health``, ``metrics``).
"""
