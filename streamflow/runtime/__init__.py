"""One replica of one streamlet against Kafka.

The entry point is :func:`~streamflow.runtime.replica.run_replica`. Around it:
the client factory seam (``clients``), delivery guarantees (``delivery``),
the data loop (``processor``), control inlets (``control``), ingress loops
(``source``, ``serve``), dead letters (``dlq``), topics (``topics``), and the
health and metrics endpoints (``health``, ``metrics``).
"""
