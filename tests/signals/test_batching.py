"""plan_batches: every row once, longest first, within the budget, padding bounded."""

import doctest

import numpy as np
import pytest

from mlflow_mia.signals import batching
from mlflow_mia.signals.batching import pad_batch, plan_batches


def test_docstring_examples():
    assert doctest.testmod(batching).failed == 0


@pytest.mark.parametrize("seed", range(5))
def test_every_row_once_within_budget_and_bounded_padding(seed):
    rng = np.random.default_rng(seed)
    lengths = np.repeat(rng.integers(5, 120, size=60), 10)  # 60 samples x K = 10 copies
    budget = 2048
    batches = list(plan_batches(lengths, budget))
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    assert (np.diff(lengths[rows]) <= 0).all()  # longest first
    greedy = list(plan_batches(lengths, budget, max_padding=1.0))
    for batch in batches:
        width = lengths[batch].max()
        assert len(batch) * width <= budget or len(batch) == 1
        fill = -(-int(0.25 * budget) // width)  # rows a batch takes before it may close early
        assert (lengths[batch[fill:]] >= 0.95 * width).all()  # after that, no row adds over 5 % padding

    def waste(bs):
        return sum(len(b) * lengths[b].max() - lengths[b].sum() for b in bs)

    assert waste(batches) <= waste(greedy)
    assert all(len(b) * lengths[b].max() <= budget or len(b) == 1 for b in greedy)
    assert len(greedy) <= len(batches)


def test_pad_batch_pads_right_with_the_pad_id():
    ids, mask = pad_batch([np.array([4, 5]), np.array([6, 7, 8])], pad_id=1)
    assert ids.tolist() == [[4, 5, 1], [6, 7, 8]] and mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_heap_trimmer_trims_when_resident_memory_outgrows_the_slack():
    from mlflow_mia.signals.runtime import HeapTrimmer

    resident = iter([100, 120, 170, 90, 150, 95])  # floor, then one reading per batch (and one after each trim)
    trims = []
    trimmer = HeapTrimmer(slack=50, rss=lambda: next(resident), trim=lambda: trims.append(1))
    assert trimmer.after_batch((4, 8)) is False  # 120 <= 100 + 50
    assert trimmer.after_batch((4, 8)) is True   # 170 > 150: trimmed, new floor 90
    assert trimmer.after_batch((2, 16)) is True  # 150 > 90 + 50
    assert len(trims) == 2


def test_heap_trimmer_without_resident_memory_trims_on_shape_change():
    from mlflow_mia.signals.runtime import HeapTrimmer

    trims = []
    trimmer = HeapTrimmer(rss=lambda: None, trim=lambda: trims.append(1))
    assert [trimmer.after_batch(s) for s in [(4, 8), (4, 8), (2, 16), (2, 16), (4, 8)]] == [True, False, True,
                                                                                            False, True]
    assert len(trims) == 3


def test_resident_bytes_reads_this_process():
    import sys

    from mlflow_mia.signals.runtime import resident_bytes

    rss = resident_bytes()
    if sys.platform.startswith("linux"):
        assert rss is not None and 10 << 20 < rss < 64 << 30
    else:
        assert rss is None
