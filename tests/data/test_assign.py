"""Angel's greedy split assignment, on its own (no Dask)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.data._assign import assign, task_workers


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60), st.integers(1, 8))
def test_every_split_once_and_load_within_one_split_of_optimal(sizes, n_tasks):
    tasks = task_workers([f"w{i}" for i in range(3)], n_tasks)
    plan = assign(sizes, [set()] * len(sizes), tasks, slack=0.0)
    assert sorted(i for p in plan for i in p) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in p) for p in plan]
    # LPT greedy: the most loaded task exceeds the mean by at most the largest split
    assert max(loads) <= sum(sizes) / n_tasks + max(sizes)


def test_locality_is_preferred_within_the_bound():
    tasks = ["a", "b", "c", "d"]
    holders = [{"c"}, {"c"}, {"c"}, {"a"}]
    # largest first: 3 goes home to a, 0 home to c; c is then at the bound, so its
    # other splits go to the least loaded tasks
    assert assign([10, 10, 10, 12], holders, tasks, slack=0.0) == [[3], [1], [0], [2]]
    # with slack, c keeps a second local split
    assert assign([10, 10, 10, 12], holders, tasks, slack=1.0) == [[3], [2], [0, 1], []]


def test_more_tasks_than_splits_leaves_tasks_empty_not_failing():
    plan = assign([5], [set()], ["a", "b", "c"])
    assert plan == [[0], [], []]
