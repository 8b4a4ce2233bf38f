"""The event timeline: a heap of occurrences keyed by round or simulated time.

Occurrences of repeating events are generated lazily, one at a time, so an
event that repeats forever on the time clock costs nothing until it is due.
Same-key occurrences break ties by (priority of their kind, order written),
so a scenario and its seed fix the whole event trace. The timeline's position
is how many occurrences of each event it has handed out (`fired`): a
checkpoint keeps that, and a timeline rebuilt from the same events with it
hands out what the old one would have.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .events import PRIORITY, Event


@dataclass(frozen=True, order=True)
class Occurrence:
    """One firing of one event."""

    key: float
    priority: int
    index: int = field(compare=True)
    event: Event = field(compare=False)


class Timeline:
    """The scenario's events, handed out as their keys come due.

    Args:
        events: the scenario's events.
        fired: occurrences already handed out, by event index (a resumed run).
    """

    def __init__(
        self, events: Sequence[Event], fired: Mapping[int, int] | None = None
    ) -> None:
        self._heaps: dict[str, list[tuple[Occurrence, Iterator[float]]]] = {
            "round": [],
            "time": [],
        }
        self.fired: dict[int, int] = dict(fired or {})
        for index, event in enumerate(events):
            keys = event.occurrences(float("inf"))
            for _ in range(self.fired.get(index, 0)):
                next(keys, None)
            self._push(index, event, keys)

    def due(self, round: int, sim_time: float) -> list[Occurrence]:
        """Occurrences whose round ≤ `round` or whose time ≤ `sim_time`, in order."""
        fired: list[Occurrence] = []
        for clock, now in (("round", float(round)), ("time", sim_time)):
            heap = self._heaps[clock]
            while heap and heap[0][0].key <= now + 1e-9:
                occurrence, keys = heapq.heappop(heap)
                fired.append(occurrence)
                self.fired[occurrence.index] = self.fired.get(occurrence.index, 0) + 1
                self._push(occurrence.index, occurrence.event, keys)
        return sorted(fired, key=lambda o: (o.priority, o.index, o.key))

    def _push(self, index: int, event: Event, keys: Iterator[float]) -> None:
        key = next(keys, None)
        if key is not None:
            occurrence = Occurrence(key, PRIORITY[event.kind], index, event)
            heapq.heappush(self._heaps[event.clock], (occurrence, keys))
