"""Eviction policies of the RAM tier: which unpinned entry leaves first.

Role in the data flow: ExpertStore asks its policy for victims when a load needs
room; the store benchmark replays traces through the same classes. A policy only
orders keys: it never sees buffers, sizes or pins (the store skips pinned keys).

    lru   least recently used
    lfu   least frequently used, counts kept across evictions (ties: least recently used)
    lfru  frequency with exponential decay (LRFU): each access adds 1 to a score
          that halves every `half_life` accesses; evict the lowest score. With a
          short half-life it behaves like LRU, with a long one like LFU.
"""
import math
from collections import OrderedDict

from ..errors import InvalidArgument

POLICIES = ("lru", "lfu", "lfru")


class LRUPolicy:
    name = "lru"

    def __init__(self):
        self._order = OrderedDict()

    def insert(self, key):
        self._order[key] = None
        self._order.move_to_end(key)

    def access(self, key):
        if key in self._order:
            self._order.move_to_end(key)

    def remove(self, key):
        self._order.pop(key, None)

    def victims(self):
        """Keys from first to last candidate for eviction."""
        return list(self._order)


class _ScoredPolicy:
    """Shared bookkeeping of the frequency policies: which keys are cached, a clock,
    and eviction in ascending _rank order. Subclasses keep per-key history in _bump
    (it survives eviction) and define _rank."""

    def __init__(self):
        self._cached = set()
        self._clock = 0

    def insert(self, key):
        self._cached.add(key)
        self._bump(key)

    def access(self, key):
        if key in self._cached:
            self._bump(key)

    def remove(self, key):
        self._cached.discard(key)

    def victims(self):
        return sorted(self._cached, key=self._rank)


class LFUPolicy(_ScoredPolicy):
    """Perfect LFU: access counts survive eviction (the key universe, layers x
    experts, is small), so a popular expert that was pushed out returns with its
    history. Ties go to the least recently used."""
    name = "lfu"

    def __init__(self):
        super().__init__()
        self._count = {}
        self._last = {}

    def _bump(self, key):
        self._clock += 1
        self._count[key] = self._count.get(key, 0) + 1
        self._last[key] = self._clock

    def _rank(self, key):
        return (self._count[key], self._last[key])


class LFRUPolicy(_ScoredPolicy):
    """LRFU: score(t) = sum over past accesses a of 2^-((t - a) / half_life).

    The victim order only needs log2(score) + t_last / half_life, which does not
    change between accesses, so each entry keeps one number.
    """
    name = "lfru"

    def __init__(self, half_life=256.0):
        if half_life <= 0:
            raise InvalidArgument(f"lfru half_life must be > 0, got {half_life}")
        super().__init__()
        self.half_life = float(half_life)
        self._score = {}      # key -> (score at t_last, t_last); kept across evictions

    def _bump(self, key):
        self._clock += 1
        score, last = self._score.get(key, (0.0, self._clock))
        decayed = score * 2.0 ** (-(self._clock - last) / self.half_life)
        self._score[key] = (decayed + 1.0, self._clock)

    def _rank(self, key):
        score, last = self._score[key]
        return math.log2(score) + last / self.half_life


def make_policy(name, **options):
    if name == "lru":
        return LRUPolicy()
    if name == "lfu":
        return LFUPolicy()
    if name == "lfru":
        return LFRUPolicy(**options)
    raise InvalidArgument(f"unknown cache policy {name!r}; expected one of {', '.join(POLICIES)}")
