"""The peer frameworks' passthrough children; they run only from bench/.venv.

Nothing here imports streamflow: the peers' virtualenv does not have it, and a peer
must not get any help from our runtime. They share :mod:`bench.common` (schema,
single-object header, report lines) with the hand-written loop.
"""
