"""Reconciling what should run with what runs: the planner and its executors.

The layers, from the top (enforced by import-linter, see pyproject.toml):
``backends`` picks a backend by name for the CLI; the backends ``local`` and
``kubernetes`` (and the web view, ``web``) know nothing of each other; they
share ``targets`` (the Target protocol, status, phases, change checking) and
``autoscale`` (the policy); ``planner`` is pure and at the bottom.
"""
