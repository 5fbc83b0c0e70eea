"""Canary sets: templates, drawing, inclusion bits, insertion into every data kind, the secret file."""

from __future__ import annotations

import os
import stat

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mlflow_mia.canaries import CanarySet, Template, insert, make_canaries
from mlflow_mia.canaries.templates import DEFAULT_TEMPLATES, parse_templates
from mlflow_mia.hashing import lookup_hash


def test_default_templates_mix_secret_format_and_pii():
    kinds = [t.is_secret_format for t in DEFAULT_TEMPLATES]
    assert any(kinds) and not all(kinds)
    text, secret = Template("phone", "call {name} on {phone}").fill(np.random.default_rng(0))
    assert secret is None and "555-" in text and "{" not in text


def test_make_canaries_is_deterministic_per_seed_and_balanced_over_repetitions():
    a = make_canaries(100, seed=3)
    b = make_canaries(100, seed=3)
    c = make_canaries(100, seed=4)
    assert a.texts == b.texts and (a.included == b.included).all() and (a.repetitions == b.repetitions).all()
    assert a.texts != c.texts
    assert len(set(a.texts)) == 100
    assert sorted(np.unique(a.repetitions, return_counts=True)[1].tolist()) == [20] * 5
    secret = a.is_secret_format
    for text, tid, s in zip(np.array(a.texts)[secret], np.array(a.template_ids)[secret],
                            np.array(a.secrets, dtype=object)[secret]):
        assert a.template(tid).render(s) == text


def test_inclusion_bits_have_the_stated_probability_over_seeds():
    for p in (0.5, 0.2):
        included = np.concatenate([make_canaries(50, ["n {digits:6}"], p_include=p, seed=s).included
                                   for s in range(200)])
        assert stats.binomtest(int(included.sum()), included.size, p).pvalue > 0.001
    # independent of the canary's position: every position is included about half the time
    per_position = np.sum([make_canaries(20, ["n {digits:6}"], seed=s).included for s in range(400)], axis=0)
    assert min(stats.binomtest(int(k), 400, 0.5).pvalue for k in per_position) > 0.001 / 20  # Bonferroni


def test_without_a_seed_secrets_and_bits_come_from_the_cryptographic_source(tmp_path):
    templates = ["n {digits:9}", "call {name} on {phone}"]
    a = make_canaries(200, templates, repetitions=(1, 4))
    b = make_canaries(200, templates, repetitions=(1, 4))
    assert a.seed is None and b.seed is None
    assert not set(a.texts) & set(b.texts) and (a.included != b.included).any()
    # no small seed regenerates a set: a search over seeds 0..1999 matches neither its texts nor its bits
    small = make_canaries(12, templates, repetitions=(1, 4))
    for seed in range(2000):
        again = make_canaries(12, templates, repetitions=(1, 4), seed=seed)
        assert again.texts != small.texts
    # the bits are fair coins, independent of the position
    bits = np.concatenate([make_canaries(50, ["n {digits:6}"]).included for _ in range(100)])
    assert stats.binomtest(int(bits.sum()), bits.size, 0.5).pvalue > 0.001
    # the secret file records that no seed made it, and reads back
    back = CanarySet.load(a.save(tmp_path / "canaries.json"))
    assert back.seed is None and back.texts == a.texts and (back.included == a.included).all()


def test_an_explicit_seed_is_refused_unless_a_non_negative_int():
    for bad in (-1, 1.5, "0", True):
        with pytest.raises(ValueError, match="seed must be an int >= 0"):
            make_canaries(10, ["n {digits:6}"], seed=bad)
    assert make_canaries(10, ["n {digits:6}"], seed=7).seed == 7


def test_make_canaries_refuses_bad_settings():
    with pytest.raises(ValueError, match="m must be an int >= 2"):
        make_canaries(1)
    with pytest.raises(ValueError, match="p_include must be in"):
        make_canaries(10, p_include=1.0)
    with pytest.raises(ValueError, match="has 100 secrets, too few for 60 canaries"):
        make_canaries(60, ["pin {digits:2}"])
    with pytest.raises(ValueError, match="unknown slot"):
        parse_templates(["my {secret}"])


@pytest.fixture
def canaries():
    return make_canaries(12, ["my pin is {digits:6}", "call {name} at {phone}"], repetitions=(1, 3), seed=0)


def test_insert_into_a_list_is_deterministic_and_keeps_the_original_order(canaries):
    base = [f"row {i}" for i in range(30)]
    out = insert(base, canaries, seed=5)
    assert out == insert(base, canaries, seed=5)
    assert out != insert(base, canaries, seed=6)
    assert len(out) == 30 + canaries.n_copies
    assert [t for t in out if t.startswith("row ")] == base
    for text, r, inc in zip(canaries.texts, canaries.repetitions, canaries.included):
        assert out.count(text) == (r if inc else 0)


def test_insert_returns_the_same_kind(canaries):
    base = [f"row {i}" for i in range(8)]
    as_list = insert(base, canaries, seed=1)
    series = insert(pd.Series(base, name="body", index=range(100, 108)), canaries, seed=1)
    assert isinstance(series, pd.Series) and series.name == "body" and series.tolist() == as_list
    frame = insert(pd.DataFrame({"text": base, "label": range(8)}), canaries, seed=1)
    assert isinstance(frame, pd.DataFrame) and frame["text"].tolist() == as_list
    assert frame["label"].isna().sum() == canaries.n_copies
    import datasets

    ds = insert(datasets.Dataset.from_dict({"text": base, "label": list(range(8))}), canaries, seed=1)
    assert isinstance(ds, datasets.Dataset) and ds["text"] == as_list
    with pytest.raises(ValueError, match="text_column 'body' is not a column"):
        insert(pd.DataFrame({"text": base}), canaries, text_column="body")
    with pytest.raises(TypeError, match="insert takes a list"):
        insert(np.array(base), canaries)


def test_insert_returns_the_digest_of_the_data_it_planted_the_set_in(canaries):
    from mlflow_mia.canaries import Planted, dataset_digest

    base = [f"row {i}" for i in range(8)]
    planted = insert(base, canaries, seed=1, with_digest=True)
    assert isinstance(planted, Planted) and planted.data == insert(base, canaries, seed=1)
    assert planted.planted_in == dataset_digest(planted.data) and planted.planted_in.startswith("sha256:")
    assert len(planted.planted_in) == len("sha256:") + 64
    # every kind of data gets the digest of its texts: the same texts, the same digest
    series = insert(pd.Series(base, name="body"), canaries, seed=1, with_digest=True)
    frame = insert(pd.DataFrame({"body": base, "label": range(8)}), canaries, seed=1, text_column="body",
                   with_digest=True)
    import datasets

    ds = insert(datasets.Dataset.from_dict({"text": base}), canaries, seed=1, with_digest=True)
    assert series.planted_in == frame.planted_in == ds.planted_in == planted.planted_in
    assert insert(base, canaries, seed=2, with_digest=True).planted_in != planted.planted_in  # other positions
    other = make_canaries(12, ["my pin is {digits:6}", "call {name} at {phone}"], repetitions=(1, 3))
    assert insert(base, other, seed=1, with_digest=True).planted_in != planted.planted_in


def test_the_secret_file_is_private_and_round_trips(tmp_path, canaries):
    path = canaries.save(tmp_path / "canaries.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    back = CanarySet.load(path)
    assert back.texts == canaries.texts and (back.included == canaries.included).all()
    assert back.secrets == canaries.secrets and back.templates == canaries.templates
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a canary set file"):
        CanarySet.load(tmp_path / "other.json")


def test_only_keyed_hashes_and_counts_leave_the_set(canaries):
    key = b"k" * 32
    hashes = canaries.keyed_hashes(key)
    assert hashes[0] == lookup_hash(canaries.texts[0], key) and len(set(hashes)) == len(canaries)
    counts = canaries.counts()
    assert counts["n_canaries"] == 12 and counts["n_copies"] == canaries.n_copies
    assert counts["r1/n_canaries"] + counts["r3/n_canaries"] == 12
    digest = canaries.digest(key)
    assert len(digest) == 16 and digest != canaries.digest(b"j" * 32)
    assert not any(s in str(counts) + digest for s in canaries.secrets if s)
