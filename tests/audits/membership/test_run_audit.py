import math
import random

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalCache
from mlflow_mia.signals.testing import WORDS, tiny_bert

ALPHA_WORDS = [w for w in WORDS if w.isalpha()]
FAST = dict(signal=SignalConfig(num_masks=3), metrics=MetricConfig(fprs=(0.1, 0.05), bootstrap_rounds=50))


def sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(ALPHA_WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def train_mlm(model, tok, texts, steps, seed=0):
    """A few hundred MLM steps on ``texts``: enough for a tiny BERT to memorize them."""
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=seed)
    enc = [tok(t) for t in texts]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        batch = collator([enc[i] for i in rng.sample(range(len(enc)), 16)])
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def setup():
    texts = sentences(260, seed=0)
    members, non_members, population, reference_data = texts[:30], texts[30:60], texts[60:140], texts[140:]
    base, tok = tiny_bert(seed=0, hidden=48)
    reference = train_mlm(base, tok, reference_data, steps=60, seed=1)
    target, _ = tiny_bert(tok, seed=0, hidden=48)
    target.load_state_dict(reference.state_dict())  # fine-tuned from the reference's starting point
    target = train_mlm(target, tok, members, steps=100, seed=2)
    pool = AuditDataset(texts=members + non_members, labels=[1] * 30 + [0] * 30,
                        groups=[f"u{i // 3}" for i in range(60)])
    return MaskedLM(target, tok, name="target"), MaskedLM(reference, tok, name="reference"), pool, \
        PopulationSet(texts=population)


def test_memorized_members_score_higher_label_convention(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    for name in ("loss", "likelihood_ratio"):
        scores = res.samples[f"score_{name}"].to_numpy()
        assert res.metrics[f"{name}/auc"] == pytest.approx(roc_auc_score(pool.labels, scores))
    # Members (label 1) get higher scores, and the reference calibrates the loss (the paper's finding).
    assert res.metrics["loss/auc"] > 0.75
    assert res.metrics["likelihood_ratio/auc"] > 0.9 > res.metrics["loss/auc"]
    # Scores are the negated energies: the loss score of a sample is -E(s; target).
    assert (res.samples["score_loss"] < 0).all()


def test_metric_names_and_population_thresholds(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    m = res.metrics
    for name in ("loss", "likelihood_ratio"):
        for key in ("auc", "auc_ci_low", "auc_ci_high", "tpr_at_fpr_0.1", "tpr_at_fpr_0.05",
                    "precision_at_pop_fpr_0.1", "recall_at_pop_fpr_0.05", "achieved_fpr_at_pop_fpr_0.1",
                    "auc_len_10-20"):
            assert f"{name}/{key}" in m
        assert f"user/{name}/auc" in m
        scores = res.samples[f"score_{name}"].to_numpy()
        pop = res.population_scores[name]
        t = m[f"{name}/threshold_at_pop_fpr_0.1"]
        assert np.mean(pop > t) <= 0.1  # the threshold is a population quantile ...
        flagged = scores > t
        assert res.samples[f"flagged_{name}_fpr_0.1"].tolist() == flagged.tolist()
        assert m[f"{name}/recall_at_pop_fpr_0.1"] == pytest.approx(flagged[pool.labels == 1].mean())
        assert m[f"{name}/achieved_fpr_at_pop_fpr_0.1"] == pytest.approx(flagged[pool.labels == 0].mean())
        assert m[f"{name}/auc_ci_low"] <= m[f"{name}/auc"] <= m[f"{name}/auc_ci_high"]
    assert "loss/precision_at_mean_member_loss" in m and "likelihood_ratio/precision_at_mean_member_loss" not in m
    assert not any(k.endswith(("_at_mu", "/mu")) for k in m)  # the former names are gone
    assert m["n_members"] == 30 and m["user/n_members"] == 10
    assert "text" not in res.samples.columns  # no raw text in the per-sample table


def test_epsilon_lower_bound_from_pool_counts_at_population_thresholds(setup):
    from mlflow_mia.metrics.epsilon import epsilon_lower_bound_from_counts

    target, reference, pool, population = setup
    metrics = MetricConfig(fprs=(0.1, 0.05), bootstrap_rounds=0, delta=1e-3, confidence=0.9)
    res = run_audit(target, pool, population, references=[reference],
                    config=AuditConfig(signal=SignalConfig(num_masks=3), metrics=metrics), progress=False)
    y = pool.labels
    for name in ("loss", "likelihood_ratio"):
        flagged = [res.samples[f"flagged_{name}_fpr_{a}"].to_numpy() for a in ("0.1", "0.05")]
        expected = epsilon_lower_bound_from_counts(
            [int(f[y == 1].sum()) for f in flagged], [int(f[y == 0].sum()) for f in flagged],
            n_members=30, n_non_members=30, delta=1e-3, confidence=0.9)
        assert res.metrics[f"{name}/epsilon_lower_bound"] == expected.epsilon
        assert res.metrics[f"{name}/epsilon_lower_bound_point"] == expected.epsilon_point
        assert res.attacks[name].epsilon.delta == 1e-3
    # No group column in the population: no user-level thresholds, so no user-level bound.
    assert "user/loss/epsilon_lower_bound" not in res.metrics


def test_intervals_resample_groups_and_unresolved_rates_are_nan_with_their_reason(setup):
    from mlflow_mia.metrics import auc_statistic, bootstrap_distribution, tpr_at_fpr, tpr_at_fpr_statistic
    from mlflow_mia.metrics.binomial import tpr_bounds_at_fpr
    from mlflow_mia.metrics.epsilon import epsilon_lower_bound_from_counts, max_certifiable_epsilon

    target, reference, pool, population = setup
    by_article = PopulationSet(texts=population.texts, groups=[f"p{i // 8}" for i in range(len(population))])
    metrics = MetricConfig(fprs=(0.1, 0.05, 0.02), bootstrap_rounds=50)
    res = run_audit(target, pool, by_article, references=[reference],
                    config=AuditConfig(signal=SignalConfig(num_masks=3), metrics=metrics), progress=False)
    m, stats, y = res.metrics, res.summary()["statistics"], pool.labels
    for name in ("loss", "likelihood_ratio"):
        # Sample level: the 10 member and 10 non-member users (3 samples each) are resampled, not the samples.
        scores = res.samples[f"score_{name}"].to_numpy()
        dist = bootstrap_distribution(y, scores, statistics={"auc": auc_statistic, "t": tpr_at_fpr_statistic(0.1)},
                                      rounds=50, seed=0, groups=pool.groups)
        assert (m[f"{name}/auc_ci_low"], m[f"{name}/auc_ci_high"]) == dist.interval("auc", confidence=0.95)
        assert m[f"{name}/tpr_at_fpr_0.1_upper_bootstrap"] == dist.upper("t", confidence=0.95)
        assert m[f"{name}/tpr_at_fpr_0.1_lower_bootstrap"] == dist.lower("t", confidence=0.95)
        # The binomial bounds count the groups as trials and include the threshold's noise.
        binomial = tpr_bounds_at_fpr(y, scores, alpha=0.1, confidence=0.95, groups=pool.groups)
        assert m[f"{name}/tpr_at_fpr_0.1_upper_binomial"] == binomial.upper
        assert m[f"{name}/tpr_at_fpr_0.1_lower_binomial"] == binomial.lower
        assert m[f"{name}/tpr_at_fpr_0.1_upper"] == max(binomial.upper, dist.upper("t", confidence=0.95))
        assert m[f"{name}/tpr_at_fpr_0.1_lower"] == min(binomial.lower, dist.lower("t", confidence=0.95))
        assert stats["sample"][name]["bootstrap"] == {"unit": "group", "n_members": 10, "n_non_members": 10,
                                                      "rounds": 50, "stratified_by_label": True,
                                                      "population": "groups"}
        assert stats["user"][name]["bootstrap"]["unit"] == "user"
        # 30 non-members resolve FPR 0.05 but not 0.02: nan, no interval, and the reason.
        assert m[f"{name}/tpr_at_fpr_0.05"] == tpr_at_fpr(y, scores, alpha=0.05)
        assert math.isnan(m[f"{name}/tpr_at_fpr_0.02"]) and f"{name}/tpr_at_fpr_0.02_upper" not in m
        assert f"{name}/tpr_at_fpr_0.02_ci_low" not in m
        assert stats["sample"][name]["unresolved"] == {"tpr_at_fpr_0.02": "30 non-members < 50 needed for FPR 0.02"}
        # User level: 10 non-member users resolve only FPR 0.1; the population's 10 articles give a threshold
        # at 0.1 and none at 0.05 or 0.02, each with its own reason.
        assert not math.isnan(m[f"user/{name}/tpr_at_fpr_0.1"]) and math.isnan(m[f"user/{name}/tpr_at_fpr_0.05"])
        assert f"user/{name}/precision_at_pop_fpr_0.1" in m and f"user/{name}/recall_at_pop_fpr_0.1_ci_low" in m
        assert f"user/{name}/precision_at_pop_fpr_0.05" not in m
        assert stats["user"][name]["unresolved"] == {
            "tpr_at_fpr_0.05": "10 non-member users < 20 needed for FPR 0.05",
            "tpr_at_fpr_0.02": "10 non-member users < 50 needed for FPR 0.02",
            "pop_fpr_0.05": "10 population groups < 20 needed for FPR 0.05",
            "pop_fpr_0.02": "10 population groups < 50 needed for FPR 0.02"}
        # The user-level epsilon bound: one trial per user, at the one user-level threshold.
        users = res.samples.groupby("group").agg(label=("label", "first"), score=(f"score_{name}", "mean"))
        flagged = users["score"] > m[f"user/{name}/threshold_at_pop_fpr_0.1"]
        expected = epsilon_lower_bound_from_counts([int((flagged & (users.label == 1)).sum())],
                                                   [int((flagged & (users.label == 0)).sum())],
                                                   n_members=10, n_non_members=10, delta=1e-5, confidence=0.95)
        assert m[f"user/{name}/epsilon_lower_bound"] == expected.epsilon
        assert m[f"user/{name}/epsilon_lower_bound_max_certifiable"] == max_certifiable_epsilon(10, 10)
        assert m[f"{name}/epsilon_lower_bound_max_certifiable"] == max_certifiable_epsilon(30, 30, n_thresholds=3)
        assert stats["user"][name]["epsilon"]["trials"] == ("one trial per group (its samples' mean score): "
                                                            "a group-level bound")
        assert "at best a bound on group-level epsilon" in stats["sample"][name]["epsilon"]["trials"]


def test_user_level_score_is_mean_of_user_samples(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference],
                    config=AuditConfig(attacks=("loss",), **FAST), progress=False)
    user_scores = res.samples.groupby("group")["score_loss"].mean()
    user_labels = res.samples.groupby("group")["label"].first()
    assert res.metrics["user/loss/auc"] == pytest.approx(roc_auc_score(user_labels, user_scores))


def test_rows_stay_paired_when_pool_is_shuffled(setup):
    target, reference, pool, population = setup
    order = np.random.default_rng(0).permutation(len(pool))
    shuffled = AuditDataset(texts=[pool.texts[i] for i in order], labels=pool.labels[order],
                            sample_ids=[pool.sample_ids[i] for i in order])
    a = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    b = run_audit(target, shuffled, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    merged = a.samples.merge(b.samples, on="sample_id")
    np.testing.assert_allclose(merged["score_likelihood_ratio_x"], merged["score_likelihood_ratio_y"], rtol=1e-6)
    assert a.metrics["likelihood_ratio/auc"] == pytest.approx(b.metrics["likelihood_ratio/auc"])


def test_second_target_reuses_cached_reference(setup, tmp_path):
    target, reference, pool, population = setup
    cache = SignalCache(tmp_path)
    run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), cache=cache, progress=False)
    calls = []
    hook = reference.model.base_model.embeddings.register_forward_hook(lambda *a: calls.append(1))
    other_target = MaskedLM(tiny_bert(target.tokenizer, seed=5, hidden=48)[0], target.tokenizer)
    run_audit(other_target, pool, population, references=[reference], config=AuditConfig(**FAST), cache=cache,
              progress=False)
    hook.remove()
    assert calls == []


def test_riskiest_records_are_flagged_members_by_score(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    lr = res.riskiest[res.riskiest["attack"] == "likelihood_ratio"]
    t = res.metrics["likelihood_ratio/threshold_at_pop_fpr_0.05"]
    assert (lr["score"] > t).all() and list(lr["score"]) == sorted(lr["score"], reverse=True)
    labels = dict(zip(res.samples["sample_id"], res.samples["label"]))
    assert all(labels[s] == 1 for s in lr["sample_id"])


def test_figures_are_returned_not_shown(setup):
    import matplotlib.pyplot as plt

    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    before = plt.get_fignums()
    figs = res.figures()
    assert {"plots/roc.png", "plots/roc_loglog.png", "plots/user_roc.png", "plots/hist_loss.png",
            "plots/hist_likelihood_ratio.png"} <= set(figs)
    assert plt.get_fignums() == before
    assert figs["plots/roc_loglog.png"].axes[0].get_xscale() == "log"


# --- bad input: each is refused before any model runs ----------------------------------------------

def _never_run(setup):
    target, reference, pool, population = setup
    calls = []
    hooks = [m.model.base_model.embeddings.register_forward_hook(lambda *a: calls.append(1))
             for m in (target, reference)]
    return calls, hooks


def test_missing_reference_is_an_error(setup):
    target, _, pool, population = setup
    with pytest.raises(ValueError, match=r"\['likelihood_ratio'\] need a reference model.*references=\[model\]"):
        run_audit(target, pool, population, config=AuditConfig(**FAST), progress=False)


def test_pool_with_one_class_is_an_error(setup):
    target, reference, pool, population = setup
    members_only = AuditDataset(texts=pool.texts[:30], labels=[1] * 30)
    with pytest.raises(ValueError, match=r"no non-members \(label 0\)"):
        run_audit(target, members_only, population, references=[reference], progress=False)


def test_population_too_small_says_how_many_it_needs(setup):
    target, reference, pool, population = setup
    calls, hooks = _never_run(setup)
    with pytest.raises(ValueError, match="has 80 samples; a threshold at FPR 0.001 needs at least 1000"):
        run_audit(target, pool, population, references=[reference], progress=False)
    for h in hooks:
        h.remove()
    assert calls == []


def test_missing_population_is_an_error(setup):
    target, reference, pool, _ = setup
    with pytest.raises(ValueError, match="population set is required"):
        run_audit(target, pool, None, references=[reference], progress=False)


def test_pool_and_population_must_be_disjoint(setup):
    target, reference, pool, population = setup
    leaky = PopulationSet(texts=population.texts + pool.texts[:1])
    with pytest.raises(ValueError, match="1 text.*both in the target pool and the population"):
        run_audit(target, pool, leaky, references=[reference], config=AuditConfig(**FAST), progress=False)


def test_unknown_attack_lists_registered(setup):
    target, reference, pool, population = setup
    with pytest.raises(ValueError, match=r"unknown attack.*'lira'.*registered attacks: \[.*'loss'"):
        run_audit(target, pool, population, references=[reference], config=AuditConfig(attacks=("lira",)),
                  progress=False)


def test_memorization_feature_analysis_of_headline_attack(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, config=AuditConfig(attacks=("loss",), **FAST), progress=False)
    table = res.memorization_features
    assert list(table["features"]) == ["A_digits", "B_length", "C_non_alnum", "D_rare_tokens", "all"]
    assert (table["attack"] == "loss").all() and (table["flagged_at_fpr"] == 0.1).all()
    flagged = res.samples.loc[res.samples["label"] == 1, "flagged_loss_fpr_0.1"]
    assert 0 < flagged.mean() < 1
    assert table["exposed_rate"].iloc[0] == pytest.approx(flagged.mean())
    assert (table["n_train"] + table["n_test"] == 30).all()


def test_memorization_feature_analysis_skipped_with_reason(setup):
    target, reference, pool, population = setup
    res = run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    flagged = res.samples.loc[res.samples["label"] == 1, "flagged_likelihood_ratio_fpr_0.1"]
    if (~flagged).sum() >= 2:
        assert res.memorization_features is not None
    else:  # the target memorized (almost) every member: nothing to contrast
        assert res.memorization_features is None
        assert any("memorization-feature analysis skipped" in w for w in res.warnings)


def _roberta_reference(seed=5):
    """A reference whose tokenizer maps words to other ids than the target's (BERT) tokenizer."""
    from mlflow_mia.signals.testing import tiny_roberta

    model, tok = tiny_roberta(seed=seed)
    return MaskedLM(model, tok, name="roberta reference")


def test_reference_with_another_tokenizer_is_an_error(setup):
    target, _, pool, population = setup
    with pytest.raises(ValueError, match=r"tokenizer differs from the target's .*allow_tokenizer_mismatch=True.*pll"):
        run_audit(target, pool, population, references=[_roberta_reference()], config=AuditConfig(**FAST),
                  progress=False)


def test_tokenizer_mismatch_opt_in_requires_pll(setup):
    with pytest.raises(ValueError, match="allow_tokenizer_mismatch=True requires signal='pll'"):
        AuditConfig(**FAST, allow_tokenizer_mismatch=True)
    target, _, pool, population = setup
    config = AuditConfig(signal=SignalConfig(kind="pll"), metrics=FAST["metrics"], allow_tokenizer_mismatch=True)
    result = run_audit(target, pool, population, references=[_roberta_reference()], config=config, progress=False)
    assert any("tokenizer differs" in w and "opted in" in w for w in result.warnings)
    assert 0.0 <= result.metrics["likelihood_ratio/auc"] <= 1.0


def test_tokenizer_comparison_helper():
    from mlflow_mia.signals.identity import tokenizer_difference
    from mlflow_mia.signals.testing import tiny_bert_tokenizer, tiny_roberta_tokenizer

    assert tokenizer_difference(tiny_bert_tokenizer(), tiny_bert_tokenizer()) is None
    assert "vocabulary" in tokenizer_difference(tiny_bert_tokenizer(), tiny_roberta_tokenizer())
    other = tiny_bert_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["[EXTRA]"]})
    assert tokenizer_difference(tiny_bert_tokenizer(), other) is not None


def test_case_variants_of_pool_texts_in_the_population_warn(setup, caplog):
    target, _, pool, population = setup
    variants = PopulationSet(texts=list(population.texts) + [pool.texts[0].upper(), "  " + pool.texts[1].title()])
    with caplog.at_level("WARNING"):
        result = run_audit(target, pool, variants, config=AuditConfig(attacks=("loss",), **FAST), progress=False)
    assert any(w.startswith("2 population text(s) equal a pool text up to case or whitespace") for w in result.warnings)
    assert "2 population text(s) equal a pool text" in caplog.text


def test_device_is_checked_before_any_model_loads(setup, tmp_path, monkeypatch):
    from mlflow_mia.signals.runtime import resolve_device

    target, _, pool, population = setup
    with pytest.raises(ValueError, match="device 'banana' is not a torch device"):
        resolve_device("banana")
    # Checked first: the missing model folder is never opened.
    with pytest.raises(ValueError, match="device 'banana'"):
        run_audit(str(tmp_path / "no-such-model"), pool, population, device="banana", progress=False)
    # Even when every signal is in the cache (no forward pass would run).
    config = AuditConfig(attacks=("loss",), **FAST)
    cache = SignalCache(tmp_path / "cache")
    run_audit(target, pool, population, config=config, cache=cache, device="cpu", progress=False)
    with pytest.raises(ValueError, match="device 'banana'"):
        run_audit(target, pool, population, config=config, cache=cache, device="banana", progress=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device 'cuda:7': this machine has 1 CUDA device\(s\) \(cuda:0\)"):
        resolve_device("cuda:7")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device 'cuda:0': CUDA is not available"):
        resolve_device("cuda:0")


def test_engine_and_its_options_are_checked_before_any_model_loads(setup, tmp_path):
    from mlflow_mia.engines.local import LocalEngine

    target, _, pool, population = setup
    missing = str(tmp_path / "no-such-model")  # never opened: every error below comes first
    with pytest.raises(ValueError, match=r"engine must be one of \['local', 'spark'\], got 'gpu'"):
        run_audit(missing, pool, population, engine="gpu", progress=False)
    with pytest.raises(TypeError, match="spark_master"):  # engine settings belong to the engine object
        run_audit(missing, pool, population, spark_master="local[2]", store=str(tmp_path), progress=False)
    result = run_audit(target, pool, population, config=AuditConfig(attacks=("loss",), **FAST), engine=LocalEngine(),
                       progress=False)
    assert result.info["engine"] == "local" and "signals_target_s" in result.info["timings"]
    timings = result.info["timings"]  # the whole audit's time, set when the (frozen) result is built
    assert timings["total_s"] >= timings["scoring_s"] + timings["signals_target_s"] - 0.002


def test_a_reference_that_is_the_target_or_its_twin_is_refused(setup):
    """A reference with the target's weights, or the target plus 1e-4 noise, would make every ratio look like chance."""
    import copy

    import torch

    from mlflow_mia.audits.membership.checks import REFERENCE_MIN_DIFFERENCE

    target, _, pool, population = setup
    with pytest.raises(ValueError, match="has the target's own weights"):
        run_audit(target, pool, population, references=[MaskedLM(copy.deepcopy(target.model), target.tokenizer)],
                  config=AuditConfig(**FAST), progress=False)
    twin = copy.deepcopy(target.model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(1e-4 * torch.randn(p.shape, generator=gen))
    with pytest.raises(ValueError, match=rf"signals on the pool equal the target's \(mean relative difference "
                                         rf"\S+ < {REFERENCE_MIN_DIFFERENCE:g}\)"):
        run_audit(target, pool, population, references=[MaskedLM(twin, target.tokenizer)], config=AuditConfig(**FAST),
                  progress=False)


def test_stage_two_says_when_it_is_done_on_the_progress_logger(setup, caplog, monkeypatch):
    """Off a terminal the scoring stage (attacks, metrics, bootstrap) is a step with its own lines, never silent."""
    import logging

    import mlflow_mia.progress as progress

    monkeypatch.setattr(progress, "QUIET_BELOW", 0.0)  # the tiny audit is fast: say "done" whatever it took
    target, reference, pool, population = setup
    with caplog.at_level(logging.INFO, logger=progress.PROGRESS_LOGGER):
        run_audit(target, pool, population, references=[reference], config=AuditConfig(**FAST), progress=False)
    lines = [r.getMessage() for r in caplog.records if r.name == progress.PROGRESS_LOGGER]
    assert any(line.startswith("scores, metrics and bootstrap intervals: done in") for line in lines), lines
