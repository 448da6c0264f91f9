"""The bisect's search, with an oracle that knows each variant's cost (no measuring)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerbench.bisect.search import Search, Verdict

MARGIN = 0.05


def oracle_of(costs: list[float], asked: list[tuple[int, int]], unclear: frozenset[int] = frozenset()):
    def oracle(reference: int, candidate: int) -> Verdict:
        asked.append((reference, candidate))
        if candidate in unclear:
            return "skipped"
        return "slower" if costs[candidate] > costs[reference] * (1 + MARGIN) else "not slower"

    return oracle


def test_one_step_is_found_confirmed_and_each_pair_asked_once() -> None:
    costs = [1.0] * 11 + [2.0] * 5
    asked: list[tuple[int, int]] = []
    outcome = Search(16, oracle_of(costs, asked)).run()
    assert outcome.ends == "slower"
    assert [(b.last, b.first, b.direction, b.confirmed) for b in outcome.boundaries] == [
        (10, 11, "slower", True)
    ]
    assert len(asked) == len(set(asked))
    # the ends, log2(16) halvings, the confirmation, and at most PROBES looks inside
    assert len(asked) <= 1 + 4 + 1 + 4


def test_a_history_that_goes_up_down_and_up_again_reports_each_step() -> None:
    costs = [1.0] * 5 + [2.0] * 4 + [1.0] * 4 + [2.0] * 3  # up at 5, down at 9, up at 13
    outcome = Search(16, oracle_of(costs, [])).run()
    found = [(b.first, b.direction, b.confirmed) for b in outcome.boundaries]
    assert found == [(5, "slower", True), (9, "faster", True), (13, "slower", True)]


def test_ends_that_do_not_differ_stop_the_search_at_once() -> None:
    asked: list[tuple[int, int]] = []
    outcome = Search(16, oracle_of([1.0] * 16, asked)).run()
    assert (outcome.ends, outcome.boundaries, asked) == ("not slower", [], [(0, 15)])


def test_a_variant_that_cannot_be_classified_is_stepped_around() -> None:
    costs = [1.0] * 11 + [2.0] * 5
    outcome = Search(16, oracle_of(costs, [], unclear=frozenset({7, 11}))).run()
    boundary = outcome.first_bad
    assert boundary is not None
    # 11 is the first bad one, but it could not be measured: the step lies after 10, up to 12.
    assert (boundary.last, boundary.first, boundary.confirmed) == (10, 12, None)
    assert outcome.classes[11] == outcome.classes[7] == "unclassified"


def test_without_probes_it_is_a_plain_bisect() -> None:
    costs = [1.0] * 5 + [2.0] * 4 + [1.0] * 4 + [2.0] * 3
    outcome = Search(16, oracle_of(costs, []), probes=0).run()
    assert len(outcome.boundaries) == 1


def test_a_bisect_needs_two_variants() -> None:
    with pytest.raises(ValueError, match="two variants"):
        Search(1, oracle_of([1.0], []))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1.0, 2.0]), min_size=2, max_size=40))
def test_every_boundary_reported_is_real_and_the_first_step_is_found(classes: list[float]) -> None:
    """Any history of two costs, the good end cheap: every boundary reported is a change
    of cost between two adjacent variants, and when the bad end is dearer one of them is
    a change up."""
    costs = [1.0, *classes[1:]]
    asked: list[tuple[int, int]] = []
    outcome = Search(len(costs), oracle_of(costs, asked)).run()
    assert len(asked) == len(set(asked))
    for boundary in outcome.boundaries:
        assert boundary.first - boundary.last == 1 and boundary.confirmed
        went_up = costs[boundary.first] > costs[boundary.last]
        assert went_up == (boundary.direction == "slower")
    if costs[-1] > costs[0]:
        assert outcome.first_bad is not None
    else:
        assert outcome.boundaries == []
    # Boundaries alternate: up, down, up ...
    for before, after in itertools.pairwise(outcome.boundaries):
        assert before.direction != after.direction
