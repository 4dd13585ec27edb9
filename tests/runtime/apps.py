"""Streamlets used by the runtime's integration tests."""

from __future__ import annotations

import os
import time
from typing import Any

from streamflow import Backpressure, ControlInlet, Emit, Inlet, Outlet, Record, Streamlet, params


class Scale(Streamlet):
    """Copies readings, multiplied by the current factor; poison records raise."""

    inp = Inlet("in", "tests.runtime.Reading")
    out = Outlet("out", "tests.runtime.Scaled")

    def process(self, record: Record) -> dict[str, Any]:
        value = record.value
        if value["poison"]:
            raise ValueError(f"poison record {value['id']}")
        return {
            "id": value["id"],
            "seq": value["seq"],
            "value": value["value"],
            "factor_version": 0,
            "replica": self.context.replica,
        }


class BatchScale(Scale):
    """The same as Scale, vectorised."""

    def process_batch(self, records: list[Record]) -> list[Any]:
        if any(r.value["poison"] for r in records):
            raise ValueError("a poison record in the batch")
        return [super(BatchScale, self).process(r) for r in records]


class Controlled(Streamlet):
    """Scales by a factor that arrives on a control inlet; reports each control record."""

    inp = Inlet("in", "tests.runtime.Reading")
    factor = ControlInlet("factor", "tests.runtime.Factor")
    out = Outlet("out", "tests.runtime.Scaled", key=lambda r: r["id"])
    applied = Outlet("applied", "tests.runtime.Applied")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.version = 0
        self.multiplier = 1.0
        self.seen_data = False

    def on_control(self, inlet: str, record: Record) -> Emit:
        self.version = record.value["version"]
        self.multiplier = record.value["factor"]
        self.context.set_state("factor_version", str(self.version))
        return self.applied(
            {
                "version": self.version,
                "replica": self.context.replica,
                "before_data": not self.seen_data,
            },
            key=str(self.context.replica),
        )

    def process(self, record: Record) -> Emit:
        self.seen_data = True
        value = record.value
        return self.out(
            {
                "id": value["id"],
                "seq": value["seq"],
                "value": value["value"] * self.multiplier,
                "factor_version": self.version,
                "replica": self.context.replica,
            }
        )


class Count(Streamlet):
    """Emits `count` readings keyed by id."""

    out = Outlet("out", "tests.runtime.Reading", key=lambda r: r["id"])
    count = params.Int(default=1000, min=0)

    def source(self) -> Any:
        for seq in range(self.count):
            yield {"id": f"r{seq}", "seq": seq, "value": float(seq), "poison": False}


class GenScale(Scale):
    """The same as Scale, as a generator: a poison record raises inside the generator's body."""

    def process(self, record: Record) -> Any:  # type: ignore[override]
        if record.value["poison"]:
            raise ValueError(f"poison record {record.value['id']}")
        yield super().process(record)


class Throttled(Scale):
    """Scale, whose downstream pushes back once: the first time it meets ``seq`` 50."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._pushed_back = False

    def process(self, record: Record) -> dict[str, Any]:
        if record.value["seq"] == 50 and not self._pushed_back:
            self._pushed_back = True
            raise Backpressure("the downstream service is busy", retry_after=0.2)
        return super().process(record)


class HangsOnce(Scale):
    """Scale, whose loop hangs for good inside ``process`` on the record ``seq == hang_at``:
    once, since the first replica to meet it leaves ``marker``; a stuck replica, for liveness."""

    marker = params.Str(description="the file that says the hang happened")
    hang_at = params.Int(default=5000, min=0)

    def process(self, record: Record) -> dict[str, Any]:
        if record.value["seq"] == self.hang_at and not os.path.exists(self.marker):
            with open(self.marker, "w") as out:
                out.write(f"hung in replica {self.context.replica}\n")
            while True:  # stuck: no exception, no return, only a supervisor ends this
                time.sleep(1)
        return super().process(record)
