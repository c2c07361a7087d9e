"""``_core.dataset_classes``: a persisted Dataset's labels, gathered from its workers once."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, get_task_stream

import daskangel as angel
from daskangel.models._core._input import dataset_classes

pytestmark = pytest.mark.timeout(120)


def _label_tasks(ts: object) -> int:
    return sum("labels" in str(t["key"]) for t in ts.data)  # type: ignore[attr-defined]


def test_classes_of_a_persisted_dataset_are_gathered_once(client: Client) -> None:
    """Every fit on a persisted Dataset asks for its classes; its rows never change, so
    the round trip to every partition (~20 ms a fit) is made once per persisted Dataset."""
    X = np.arange(12.0).reshape(6, 2)
    a = angel.data.from_array(X, np.array([0, 1, 2, 0, 1, 2.0])).persist(client, n_partitions=2)
    b = angel.data.from_array(X, np.array([5, 7, 5, 7, 5, 7.0])).persist(client, n_partitions=2)
    try:
        with get_task_stream(client) as first:
            got = dataset_classes(a)
        with get_task_stream(client) as again:
            assert dataset_classes(a).tolist() == [0.0, 1.0, 2.0]
        got[:] = -1  # a caller's copy: the cached classes stay as they were
        with get_task_stream(client) as other:
            assert dataset_classes(b).tolist() == [5.0, 7.0]
        assert dataset_classes(a).tolist() == [0.0, 1.0, 2.0]
        assert _label_tasks(first) == 2 and _label_tasks(again) == 0
        assert _label_tasks(other) == 2  # another Dataset: its own labels
    finally:
        a.release()
        b.release()
