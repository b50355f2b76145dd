"""Fault schedule of the offload stress run: which fault fires when.

Role in the data flow: the harness asks `FaultSchedule.due(now_s)` on every
tick and hands each returned `FaultEvent` to its injector (faults.py). Events
are fixed up front from the config, so a run is reproducible and the report
can say how many of each kind were planned, injected and recovered.

Each recurring event comes from an EventSpec of the `stress:` config section
(`first_s`, `every_s`, 0 = once; `duration_s` how long a fault with an end —
slow reads, a full offload dir — stays on before the harness clears it).
Expert-table changes (`hot_add`, `hot_remove`) ride on the same clock.
"""
from dataclasses import dataclass, field

FAULT_KINDS = ("corrupt_spill", "enospc", "slow_source", "kill_worker",
               "remove_node", "truncate_segment")
TABLE_KINDS = ("hot_add", "hot_remove")


@dataclass(frozen=True, order=True)
class FaultEvent:
    at_s: float
    kind: str = field(compare=True)
    seq: int = field(compare=True, default=0)
    duration_s: float = field(compare=False, default=0.0)


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    first_s: float
    every_s: float = 0.0
    duration_s: float = 0.0


def specs_from_events(events):
    """[(kind, EventSpec)] (settings.enabled_events) -> [FaultSpec]; unknown kinds are a bug."""
    out = []
    for kind, spec in events:
        if kind not in FAULT_KINDS + TABLE_KINDS:
            raise ValueError(f"unknown stress event kind {kind!r}")
        out.append(FaultSpec(kind, spec.first_s, spec.every_s, spec.duration_s))
    return out


class FaultSchedule:
    """All fault events of a run, sorted by time; `due()` pops those whose time has come."""

    def __init__(self, specs, horizon_s):
        events = []
        for spec in specs:
            t, seq = spec.first_s, 0
            while t < horizon_s:
                events.append(FaultEvent(t, spec.kind, seq, spec.duration_s))
                seq += 1
                if spec.every_s <= 0:
                    break
                t += spec.every_s
        self.events = sorted(events)
        self._next = 0

    def planned(self):
        """{kind: count} of every event in the schedule."""
        counts = {}
        for event in self.events:
            counts[event.kind] = counts.get(event.kind, 0) + 1
        return counts

    def due(self, now_s):
        """Events with at_s <= now_s not returned before, in time order."""
        out = []
        while self._next < len(self.events) and self.events[self._next].at_s <= now_s:
            out.append(self.events[self._next])
            self._next += 1
        return out

    def remaining(self):
        return len(self.events) - self._next
