"""Benchmarks of the streamflow runtime against hand-written Kafka code.

Each benchmark is a module run with ``python -m bench.<name>``; see ``bench/README.md``.
The competitors always run as separate processes on one shared broker, so the numbers
include what a deployed replica pays (its own interpreter, librdkafka threads, GIL).
"""
