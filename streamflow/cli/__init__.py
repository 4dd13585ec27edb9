"""The ``streamflow`` command line: a typer app whose commands live in small modules.

Each ``*_cmds`` module exposes ``register(app)``; :mod:`streamflow.cli.main`
assembles them. Output helpers shared by all commands are in
:mod:`streamflow.cli.output`.
"""

__all__: list[str] = []
