"""Reconciling what should run with what runs: the planner and its executors."""
