"""Where along an ordered list of variants the cost went up: the search, given an oracle.

Variant 0 is good, the last is bad. Each variant the search looks at is put in a class by
one comparison with the *current good end* below it (the nearest variant already found good):
`slower` (bad), `not slower` (good), or neither (`undecided` after its budget, `skipped`: it
did not build or its runs failed), which leaves it unclassified and the search picks a
neighbour, as `git bisect skip` does.

1. The ends: bad against good. Not slower, or undecided, and the search stops there and says so.
2. The first bad variant between the ends, by halving.
3. A confirmation that it is slower than its parent (unless the halving compared just those two).
4. A look inside the stretches whose two ends fell in the same class: the middle of each of at
   least `MIN_STRETCH` unclassified variants is compared once (at most `probes` in all). One that
   falls in the other class means the cost went back down in there and up again (a history
   that is not monotonic): each new boundary is found by halving and confirmed like the first.

The oracle is called at most once per pair (reference, candidate); the answers it gave are all
the search needs to be run again to the same point (a resumed bisect replays them).
"""

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["slower", "not slower", "undecided", "skipped"]
Oracle = Callable[[int, int], Verdict]  # (reference, candidate) -> how the candidate compares
MIN_STRETCH = 3  # unclassified variants a stretch must hold to be looked inside
PROBES = 4  # looks inside stretches, at most


@dataclass(frozen=True)
class Boundary:
    """Where the class changes: `first` is the first variant of the new class, `last` the
    last of the old (adjacent unless the variants between could not be classified)."""

    last: int
    first: int
    direction: Literal["slower", "faster"]  # slower: good -> bad; faster: bad -> good (a way back)
    confirmed: bool | None  # the direct comparison of the two: None when not adjacent

    @property
    def exact(self) -> bool:
        return self.first - self.last == 1


@dataclass
class Outcome:
    ends: Verdict  # the bad end against the good one
    boundaries: list[Boundary] = field(default_factory=list)
    classes: dict[int, str] = field(default_factory=dict)  # variant -> "good", "bad", or "unclassified"

    @property
    def first_bad(self) -> Boundary | None:
        return next((b for b in self.boundaries if b.direction == "slower"), None)


class Search:
    """The search over variants 0..count-1 (see the module's docstring)."""

    def __init__(self, count: int, oracle: Oracle, *, probes: int = PROBES) -> None:
        if count < 2:
            raise ValueError("a bisect needs two variants at least: the good end and the bad one")
        self.count = count
        self.oracle = oracle
        self.probes_left = probes
        self.classes: dict[int, str] = {}
        self.answers: dict[tuple[int, int], Verdict] = {}

    def ask(self, reference: int, candidate: int) -> Verdict:
        pair = (reference, candidate)
        if pair not in self.answers:
            self.answers[pair] = self.oracle(reference, candidate)
        return self.answers[pair]

    def run(self) -> Outcome:
        good, bad = 0, self.count - 1
        ends = self.ask(good, bad)
        outcome = Outcome(ends)
        if ends != "slower":
            outcome.classes = {good: "good"}
            return outcome
        self.classes = {good: "good", bad: "bad"}
        found = [self._halve(good, bad)]
        found += self._look_inside()
        outcome.boundaries = sorted(found, key=lambda b: b.first)
        outcome.classes = dict(sorted(self.classes.items()))
        return outcome

    def _reference(self, candidate: int) -> int:
        """The current good end below a candidate: the nearest variant found good."""
        return max(i for i, kind in self.classes.items() if kind == "good" and i < candidate)

    def _classify(self, candidate: int) -> str | None:
        verdict = self.ask(self._reference(candidate), candidate)
        kind = {"slower": "bad", "not slower": "good"}.get(verdict)
        self.classes[candidate] = kind or "unclassified"
        return kind

    def _open(self, low: int, high: int) -> list[int]:
        """The variants strictly between low and high not tried yet."""
        return [i for i in range(low + 1, high) if i not in self.classes]

    def _halve(self, low: int, high: int) -> Boundary:
        """The boundary between low and high, whose classes differ: halving, skipping what
        cannot be classified (the middle unclassified variant nearest the centre first)."""
        low_kind = self.classes[low]
        while candidates := self._open(low, high):
            middle = (low + high) / 2
            candidate = min(candidates, key=lambda i: (abs(i - middle), i))
            kind = self._classify(candidate)
            if kind is None:
                continue
            if kind == low_kind:
                low = candidate
            else:
                high = candidate
        # Between low and high now only unclassified variants, or none.
        direction: Literal["slower", "faster"] = "slower" if low_kind == "good" else "faster"
        confirmed = None
        if high - low == 1:
            # The classes came from comparisons with the good end below; the boundary itself
            # is the two side by side: the bad one against the good one.
            reference, candidate = (low, high) if direction == "slower" else (high, low)
            confirmed = self.ask(reference, candidate) == "slower"
        return Boundary(low, high, direction, confirmed)

    def _look_inside(self) -> list[Boundary]:
        found: list[Boundary] = []
        looked: set[tuple[int, int]] = set()
        while self.probes_left > 0:
            stretch = self._widest_uniform_stretch(looked)
            if stretch is None:
                break
            low, high = stretch
            looked.add(stretch)
            candidates = self._open(low, high)
            middle = (low + high) / 2
            probe = min(candidates, key=lambda i: (abs(i - middle), i))
            self.probes_left -= 1
            kind = self._classify(probe)
            if kind is None or kind == self.classes[low]:
                continue
            found += [self._halve(low, probe), self._halve(probe, high)]
        return found

    def _widest_uniform_stretch(self, looked: set[tuple[int, int]]) -> tuple[int, int] | None:
        """Two neighbouring classified variants of one class with the most unclassified
        between them (at least MIN_STRETCH), not looked inside yet."""
        known = sorted(i for i, kind in self.classes.items() if kind in ("good", "bad"))
        stretches = [
            (low, high)
            for low, high in itertools.pairwise(known)
            if self.classes[low] == self.classes[high]
            and (low, high) not in looked
            and len(self._open(low, high)) >= MIN_STRETCH
        ]
        return max(stretches, key=lambda s: (len(self._open(*s)), -s[0]), default=None)
