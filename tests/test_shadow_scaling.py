"""``benchmarks/shadow_scaling.py``: the design of the shadow-count measurement (halves, candidates, storage)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlflow_mia.signals import SignalResult

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def scaling():
    spec = importlib.util.spec_from_file_location("shadow_scaling", _DIR / "shadow_scaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("shadow_scaling", module)
    spec.loader.exec_module(module)
    return module


def _frames(n_target: int = 40) -> dict:
    def frame(prefix, n_articles, per, **extra):
        rows = [{"text": f"{prefix} {a} {i}", "article_id": f"{prefix}/{a:03d}", **extra}
                for a in range(n_articles) for i in range(per)]
        return pd.DataFrame(rows)

    pool = pd.concat([frame("member", 3, 2, is_member=1), frame("held", 3, 2, is_member=0)], ignore_index=True)
    return {"pool": pool, "population": frame("pop", 4, 2), "target_train": frame("member", 4, n_target // 4),
            "reference_train": pd.concat([frame("business", 20, 3), frame("tech", 20, 3)], ignore_index=True)}


def test_paired_halves_hold_each_article_in_exactly_half_of_every_even_prefix(scaling):
    articles = [f"a{i}" for i in range(11)]
    halves = scaling.paired_halves(articles, 8, seed=3)
    assert len(halves) == 8
    for k in (2, 4, 6, 8):
        counts = {a: sum(a in h for h in halves[:k]) for a in articles}
        assert set(counts.values()) == {k // 2}
    assert halves[0] | halves[1] == set(articles) and not halves[0] & halves[1]
    assert halves == scaling.paired_halves(articles, 8, seed=3)
    assert halves[0] != scaling.paired_halves(articles, 8, seed=4)[0]


def test_candidates_hold_pool_population_and_twice_the_target(scaling):
    frames = _frames()
    candidates, spare = scaling.candidate_set(frames, seed=0)
    texts = set(candidates["text"])
    assert set(frames["pool"]["text"]) <= texts and set(frames["population"]["text"]) <= texts
    assert len(candidates) >= 2 * len(frames["target_train"])
    used = set(candidates["article_id"]) & set(frames["reference_train"]["article_id"])
    assert used and not used & spare  # the baseline reference never trains on a candidate article
    assert used | spare == set(frames["reference_train"]["article_id"])


def test_reference_sentences_are_whole_random_spare_articles(scaling):
    frames = _frames()
    _, spare = scaling.candidate_set(frames, seed=0)
    texts = scaling.reference_sentences(frames["reference_train"], spare, 12, seed=0)
    chosen = frames["reference_train"].loc[frames["reference_train"]["text"].isin(texts)]
    assert len(texts) >= 12 and set(chosen["article_id"]) <= spare
    assert chosen.groupby("article_id").size().eq(3).all()  # whole articles
    # Not the frame's first articles (sorted by category): both categories over a few seeds.
    categories = set()
    for seed in range(5):
        picked = scaling.reference_sentences(frames["reference_train"], spare, 12, seed=seed)
        categories |= {t.split()[0] for t in picked}
    assert categories == {"business", "tech"}


def test_pack_unpack_round_trip(scaling):
    signal = SignalResult(np.array([1.5, 2.0]), (np.array([-1.0, -2.0], np.float32), np.array([-0.5], np.float32)),
                          np.array([4, 3]), np.array([False, True]), kind="energy",
                          token_mu=(np.array([-3.0, -3.5], np.float32), np.array([-2.0], np.float32)),
                          token_sigma=(np.array([1.0, 1.1], np.float32), np.array([0.9], np.float32)))
    back = scaling.unpack(scaling.pack("target", signal), "target")
    np.testing.assert_array_equal(back.values, signal.values)
    np.testing.assert_array_equal(back.n_tokens, signal.n_tokens)
    np.testing.assert_array_equal(back.truncated, signal.truncated)
    for got, want in zip(back.token_logprobs + back.token_mu + back.token_sigma,
                         signal.token_logprobs + signal.token_mu + signal.token_sigma):
        np.testing.assert_array_equal(got, want)
    no_stats = scaling.unpack(scaling.pack("shadow-3", SignalResult.from_arrays([1.0], n_tokens=[2],
                                                                                token_logprobs=[[-1.0, -2.0]])),
                              "shadow-3")
    assert not no_stats.has_token_stats and no_stats.token_logprobs[0].tolist() == [-1.0, -2.0]


def test_shadows_are_stored_eight_to_a_file(scaling):
    assert [scaling._file_of(n) for n in ("target", "reference", "shadow-0", "shadow-7", "shadow-8", "shadow-31")] == [
        "signals_target.npz", "signals_target.npz", "signals_shadows_0.npz", "signals_shadows_0.npz",
        "signals_shadows_8.npz", "signals_shadows_24.npz"]
