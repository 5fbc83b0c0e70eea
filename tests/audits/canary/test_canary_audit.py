"""The canary audit on tiny models: exposure against a brute-force rank, metrics against sklearn."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.canary import canary_audit, candidate_secrets
from mlflow_mia.audits.canary.scoring import centre_by_template
from mlflow_mia.metrics.one_run import sparse_guess_grid
from mlflow_mia.canaries import Template, make_canaries
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.data import text_hash
from mlflow_mia.hashing import HashKey, lookup_hash
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals.testing import tiny_bert, tiny_bert_tokenizer
from mlflow_mia.tracking.canary_log import gate_points


@pytest.fixture(scope="module")
def digit_lm():
    tok = tiny_bert_tokenizer()
    tok.add_tokens([str(d) for d in range(10)])  # one token per digit
    model, tok = tiny_bert(tok, seed=0)
    return MaskedLM(model, tok, name="tiny")


@pytest.fixture(scope="module")
def reference_lm(digit_lm):
    model, tok = tiny_bert(digit_lm.tokenizer, seed=1)
    return MaskedLM(model, tok, name="tiny-ref")


TEMPLATES = [Template("record", "the record is {digits:3}"), Template("dose", "the dose was {digits:3} mg")]


@pytest.fixture(scope="module")
def canaries():
    return make_canaries(40, TEMPLATES, repetitions=(1, 2), seed=0)


def test_exposure_equals_a_brute_force_rank_over_the_full_space(digit_lm, canaries):
    config = CanaryAuditConfig(n_candidates=1000, bootstrap_rounds=0)
    result = canary_audit(digit_lm, canaries, config=config)
    for template in TEMPLATES:
        space = [f"{i:03d}" for i in range(1000)]
        energy = compute_signals(digit_lm, [template.render(s) for s in space], config.signal_config(),
                                 progress=False).values
        for row in np.flatnonzero(np.array(canaries.template_ids) == template.id):
            own = energy[int(canaries.secrets[row])]
            rank = int(np.sum(energy <= own))  # every candidate at least as likely: ties count against the secret
            assert result.exposure[row] == pytest.approx(math.log2(1000) - math.log2(rank))
        assert result.exposures[template.id].exact


def test_sampled_candidates_estimate_the_rank_and_say_so(digit_lm, canaries):
    config = CanaryAuditConfig(n_candidates=200, bootstrap_rounds=0)
    result = canary_audit(digit_lm, canaries, config=config)
    res = result.exposures["record"]
    assert not res.exact and res.n_candidates == 200 and res.resolution < math.log2(1000)
    assert np.isfinite(result.exposure).all()  # every canary is secret-format here
    secrets, exact = candidate_secrets(TEMPLATES[0], 200, seed=config.seed + 1)
    assert not exact and len(secrets) == 200 and all(len(s) == 3 for s in secrets)


def test_metrics_per_repetition_count_match_sklearn_and_the_bound_has_its_unit(digit_lm, reference_lm, canaries):
    config = CanaryAuditConfig(bootstrap_rounds=50, n_candidates=100)
    result = canary_audit(digit_lm, canaries, reference=reference_lm, config=config)
    assert result.attack == "likelihood_ratio"
    target = compute_signals(digit_lm, list(canaries.texts), config.signal_config(), progress=False).values
    ref = compute_signals(reference_lm, list(canaries.texts), config.signal_config(), progress=False).values
    tids = np.array(canaries.template_ids)
    medians = {t: np.median((ref - target)[tids == t]) for t in set(tids)}
    assert result.scores == pytest.approx(ref - target - np.array([medians[t] for t in tids]))
    for r in (1, 2):
        sel = canaries.repetitions == r
        assert result.metrics[f"canary/r{r}/auc"] == pytest.approx(
            roc_auc_score(canaries.included[sel], result.scores[sel]))
        assert result.bounds[f"r{r}"].m == int(sel.sum())
    assert result.metrics["canary/auc"] == pytest.approx(roc_auc_score(canaries.included, result.scores))
    assert result.metrics["canary/epsilon_lower_bound"] == result.bounds["r1"].epsilon
    assert "all" not in result.bounds  # units of different sizes are never pooled
    low, high = result.metrics["canary/r1/auc_ci_low"], result.metrics["canary/r1/auc_ci_high"]
    assert low <= result.metrics["canary/r1/auc"] <= high
    assert set(result.table["group"]) == {"r1", "r2", "all"}


def test_the_audit_refuses_a_set_without_both_kinds(digit_lm):
    cs = make_canaries(4, TEMPLATES, seed=0)
    one_sided = type(cs)(texts=cs.texts, template_ids=cs.template_ids, secrets=cs.secrets,
                         repetitions=cs.repetitions, included=np.ones(4, dtype=bool), templates=cs.templates)
    with pytest.raises(ValueError, match="at least 2 included and 2 excluded"):
        canary_audit(digit_lm, one_sided)


def test_centring_by_template_removes_each_templates_median_and_keeps_its_order():
    scores = np.array([5.0, 1.0, 7.0, -2.0, 0.0, 3.0, 100.0])
    tids = ["a", "b", "a", "b", "b", "a", "c"]
    out = centre_by_template(scores, tids)
    assert out.tolist() == [0.0, 1.0, 2.0, -2.0, 0.0, -2.0, 0.0]  # medians a: 5, b: 0, c: 100
    for t in set(tids):
        sel = np.array(tids) == t
        assert (np.argsort(out[sel]) == np.argsort(scores[sel])).all()


def test_the_bound_uses_the_sparse_grid_of_each_group(digit_lm, canaries):
    result = canary_audit(digit_lm, canaries, config=CanaryAuditConfig(bootstrap_rounds=0, n_candidates=100))
    for name, bound in result.bounds.items():
        assert bound.grid == sparse_guess_grid(bound.m)


def test_a_tpr_at_an_fpr_the_excluded_canaries_cannot_resolve_is_nan_with_its_reason(digit_lm, canaries):
    config = CanaryAuditConfig(bootstrap_rounds=50, n_candidates=100, fprs=(0.1, 0.01))
    result = canary_audit(digit_lm, canaries, config=config)
    for group, prefix in (("r1", "canary/r1"), ("r2", "canary/r2"), ("all", "canary")):
        sel = np.ones(len(canaries), dtype=bool) if group == "all" else canaries.repetitions == int(group[1:])
        n_excluded = int((~canaries.included[sel]).sum())  # units: one canary, whatever its repetitions
        assert n_excluded < 100
        key = f"{prefix}/tpr_at_fpr_0.01"
        assert math.isnan(result.metrics[key]) and f"{key}_ci_low" not in result.metrics
        assert result.unresolved[key] == f"{n_excluded} excluded canaries < 100 needed for FPR 0.01"
        resolved = f"{prefix}/tpr_at_fpr_0.1"
        if n_excluded >= 10:
            assert resolved not in result.unresolved and math.isfinite(result.metrics[resolved])
            assert result.metrics[f"{resolved}_ci_low"] <= result.metrics[resolved] <= result.metrics[
                f"{resolved}_ci_high"]
        else:
            assert result.unresolved[resolved] == f"{n_excluded} excluded canaries < 10 needed for FPR 0.1"


def test_sampled_exposure_headline_is_the_extrapolation_and_the_capped_rank_is_beside_it(digit_lm, canaries):
    config = CanaryAuditConfig(n_candidates=20, bootstrap_rounds=0)
    result = canary_audit(digit_lm, canaries, config=config)
    res = result.exposures["record"]
    assert not res.exact and res.resolution == pytest.approx(math.log2(21))
    assert np.nanmax(result.exposure_rank) <= math.log2(21) + 1e-12  # 20 candidates resolve log2(21) bits
    np.testing.assert_array_equal(result.exposure_capped, np.isclose(result.exposure_rank, math.log2(21)))
    assert result.exposure_capped.any()  # some secret scored ahead of all 20 sampled candidates
    finite = np.isfinite(result.exposure_extrapolated)
    np.testing.assert_array_equal(result.exposure[finite], result.exposure_extrapolated[finite])
    np.testing.assert_array_equal(result.exposure[~finite], result.exposure_rank[~finite])
    for r in (1, 2):
        inc = (canaries.repetitions == r) & canaries.included
        m = result.metrics
        assert m[f"canary/r{r}/exposure_mean"] == pytest.approx(result.exposure[inc].mean())
        assert m[f"canary/r{r}/exposure_rank_mean"] == pytest.approx(result.exposure_rank[inc].mean())
        assert m[f"canary/r{r}/exposure_rank_n_capped"] == result.exposure_capped[inc].sum()
        assert m[f"canary/r{r}/exposure_n_extrapolated"] == finite[inc].sum()
    points, _ = gate_points(result)  # the gate sees both means
    assert [(p["value"], p["rank_value"], p["n_capped"]) for p in points] == [
        (m[f"canary/r{r}/exposure_mean"], m[f"canary/r{r}/exposure_rank_mean"],
         m[f"canary/r{r}/exposure_rank_n_capped"]) for r in (1, 2)]


def test_exact_exposure_is_its_own_headline_and_never_capped(digit_lm, canaries):
    result = canary_audit(digit_lm, canaries, config=CanaryAuditConfig(n_candidates=1000, bootstrap_rounds=0))
    np.testing.assert_array_equal(result.exposure, result.exposure_rank)
    assert not result.exposure_capped.any()
    assert result.metrics["canary/r1/exposure_rank_n_capped"] == 0
    assert result.metrics["canary/r1/exposure_n_extrapolated"] == 0
    assert result.metrics["canary/r1/exposure_rank_mean"] == result.metrics["canary/r1/exposure_mean"]


def _row_hashes(cache: SignalCache) -> set:
    import sqlite3

    with contextlib.closing(sqlite3.connect(cache.path)) as conn:
        return {h for (h,) in conn.execute("SELECT text_hash FROM signal_rows")}


def test_the_cache_holds_no_recoverable_canary_secret(digit_lm, reference_lm, canaries, tmp_path):
    key = HashKey.from_bytes(b"k" * 32, source="test")
    config = CanaryAuditConfig(n_candidates=100, bootstrap_rounds=0)  # 100 of 1,000 secrets sampled per template
    cache = SignalCache(tmp_path / "cache")
    result = canary_audit(digit_lm, canaries, reference=reference_lm, config=config, cache=cache, hash_key=key)
    rows = _row_hashes(cache)
    # An offline search over every secret of both formats (canaries and candidates among them) finds no row.
    space = [t.render(f"{i:03d}") for t in TEMPLATES for i in range(1000)]
    assert len(rows) > len(canaries) and not rows & {text_hash(t) for t in space}
    assert {lookup_hash(t, key) for t in canaries.texts} <= rows  # keyed as the logged tables key texts
    # the values are those of an audit without a cache, and a second audit under the key reads them back
    plain = canary_audit(digit_lm, canaries, reference=reference_lm, config=config)
    np.testing.assert_array_equal(result.scores, plain.scores)
    np.testing.assert_array_equal(result.exposure, plain.exposure)
    n_rows = cache.count()
    again = canary_audit(digit_lm, canaries, reference=reference_lm, config=config, cache=cache, hash_key=key)
    np.testing.assert_array_equal(again.scores, plain.scores)
    assert cache.count() == n_rows
    # a random key (not kept) could never find its rows again: nothing is cached
    other = SignalCache(tmp_path / "other")
    canary_audit(digit_lm, canaries, config=config, cache=other, hash_key=HashKey.random())
    canary_audit(digit_lm, canaries, config=config, cache=other)
    assert other.count() == 0


def test_keyed_rows_give_the_unkeyed_values_and_never_meet_unkeyed_rows(digit_lm, tmp_path):
    texts = ["the record is 123", "the dose was 456 mg"]
    cache = SignalCache(tmp_path / "cache")
    config = CanaryAuditConfig(signal="energy", num_masks=3).signal_config()  # masks still come from sha256(text)
    keyed = compute_signals(digit_lm, texts, config, cache=cache, progress=False, text_key=b"k" * 32)
    plain = compute_signals(digit_lm, texts, config, progress=False)
    np.testing.assert_array_equal(keyed.values, plain.values)
    assert _row_hashes(cache) == {lookup_hash(t, b"k" * 32) for t in texts}
    other = compute_signals(digit_lm, texts, config, cache=cache, progress=False, text_key=b"j" * 32)
    np.testing.assert_array_equal(other.values, plain.values)
    assert cache.count() == 4  # another key finds none of the first key's rows


def test_scoring_runs_no_model_and_gives_the_audits_metrics(digit_lm, reference_lm, canaries, monkeypatch):
    """Stage 2 (score_canaries) reads only the signals: with the signal computation broken it gives
    canary_audit's metrics, exposures included."""
    import torch

    from mlflow_mia.audits.canary import canary_signals, score_canaries

    config = CanaryAuditConfig(n_candidates=200, bootstrap_rounds=20)
    whole = canary_audit(digit_lm, canaries, reference=reference_lm, config=config)
    signals = canary_signals(digit_lm, canaries, reference=reference_lm, config=config)
    assert signals.target.shape == signals.reference.shape == (len(canaries),)

    def no_model(*args, **kwargs):
        raise AssertionError("stage 2 ran a model")

    monkeypatch.setattr(torch.nn.Module, "__call__", no_model)  # any model forward pass fails
    monkeypatch.setattr("mlflow_mia.audits.canary.signals.sequence_values", no_model)
    scored = score_canaries(signals, canaries, config)
    assert scored.attack == whole.attack == "likelihood_ratio"
    assert scored.metrics.keys() == whole.metrics.keys()
    for key, value in whole.metrics.items():
        assert scored.metrics[key] == pytest.approx(value, nan_ok=True), key
    np.testing.assert_array_equal(scored.exposure, whole.exposure)
    with pytest.raises(ValueError, match="the signals hold 3 canaries"):
        score_canaries(signals._replace(target=signals.target[:3]), canaries, config)
