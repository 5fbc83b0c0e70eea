"""``run_audit``: dataset -> per-model signals -> attack scores -> metrics.

The one function behind every entry point (Python API, MLflow evaluator, CLI,
MLproject). It holds no MLflow code: the integrations log what it returns.

Method: Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked
Language Models Using Membership Inference Attacks", Sec. 2.4 (thresholds from
population data), Sec. 3.5 (AUC, precision, recall), Table 2 (sample and
patient level), Table 3 (length breakdown); TPR at low FPR as in Carlini et al.
(2022), "Membership Inference Attacks From First Principles".
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from mlflow_mia.attacks import ATTACKS, AttackInputs, get_attack
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.metrics.aggregate import group_scores, length_breakdown, riskiest_records
from mlflow_mia.metrics.bootstrap import auc_statistic, bootstrap_ci, tpr_at_fpr_statistic
from mlflow_mia.metrics.roc import RocResult, roc, tpr_at_fpr_from_roc
from mlflow_mia.metrics.thresholds import (ThresholdMetrics, metrics_at_threshold, min_population_size,
                                           mu_threshold, population_threshold_metrics)
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals.model import as_masked_lm

__all__ = ["run_audit", "AuditResult", "AttackReport", "fmt_alpha"]

log = logging.getLogger(__name__)


def fmt_alpha(alpha: float) -> str:
    """``0.01 -> "0.01"``: how a false-positive rate appears in metric names."""
    return f"{alpha:g}"


@dataclass(frozen=True)
class AttackReport:
    """Metrics of one attack at one level (sample or user).

    Attributes
    ----------
    name : str
        Attack name.
    roc : RocResult
        Exact ROC over the target pool.
    tpr_at_fpr : dict of float to float
        TPR read off the ROC at each alpha (largest TPR with FPR <= alpha).
    population : tuple of ThresholdMetrics
        Threshold from the population set at each alpha, with TPR (recall),
        precision and the FPR achieved on the pool. Empty when no population
        scores exist at this level.
    ci : dict of str to (float, float)
        Bootstrap percentile intervals, keys ``"auc"`` and ``"tpr_at_fpr_<alpha>"``.
    mu : ThresholdMetrics or None
        Loss attack only: the mean-member-loss threshold (Jagannatha et al. 2021).
    lengths : list of dict
        AUC per token-length bin (sample level only).
    """

    name: str
    roc: RocResult
    tpr_at_fpr: dict
    population: tuple
    ci: dict = field(default_factory=dict)
    mu: ThresholdMetrics | None = None
    lengths: list = field(default_factory=list)

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat metrics named ``{prefix}auc``, ``{prefix}tpr_at_fpr_0.01``, ..."""
        out = {f"{prefix}auc": self.roc.auc}
        if "auc" in self.ci:
            out[f"{prefix}auc_ci_low"], out[f"{prefix}auc_ci_high"] = self.ci["auc"]
        for alpha, tpr in self.tpr_at_fpr.items():
            a = fmt_alpha(alpha)
            out[f"{prefix}tpr_at_fpr_{a}"] = tpr
            if f"tpr_at_fpr_{a}" in self.ci:
                out[f"{prefix}tpr_at_fpr_{a}_ci_low"], out[f"{prefix}tpr_at_fpr_{a}_ci_high"] = self.ci[f"tpr_at_fpr_{a}"]
        for t in self.population:
            a = fmt_alpha(t.alpha)
            out[f"{prefix}precision_at_pop_fpr_{a}"] = t.precision
            out[f"{prefix}recall_at_pop_fpr_{a}"] = t.tpr
            out[f"{prefix}achieved_fpr_at_pop_fpr_{a}"] = t.fpr
            out[f"{prefix}threshold_at_pop_fpr_{a}"] = t.threshold
        if self.mu is not None:
            out[f"{prefix}precision_at_mu"] = self.mu.precision
            out[f"{prefix}recall_at_mu"] = self.mu.tpr
        for row in self.lengths:
            out[f"{prefix}auc_len_{row['bin']}"] = row["auc"]
        return out


@dataclass
class AuditResult:
    """Everything an audit found, ready to log or to read.

    Attributes
    ----------
    config : AuditConfig
    metrics : dict of str to float
        Flat metrics with stable names: ``{attack}/auc``, ``{attack}/tpr_at_fpr_0.01``,
        ``{attack}/precision_at_pop_fpr_0.01``, ``user/{attack}/auc``, ... and counts.
    samples : pandas.DataFrame
        One row per pool sample: ``sample_id``, ``text_hash``, ``label``, ``group``,
        ``n_tokens``, ``truncated``, ``score_{attack}``, ``flagged_{attack}_fpr_{alpha}``.
        No raw text.
    attacks : dict of str to AttackReport
        Sample-level reports.
    user_attacks : dict of str to AttackReport
        User-level reports (empty without groups).
    population_scores : dict of str to ndarray of shape (n_population,)
    riskiest : pandas.DataFrame
        Members flagged at the lowest alpha, by descending score, per attack.
    exposure : pandas.DataFrame or None
        Memorization-feature analysis of the headline attack (paper Sec. 4.6, Table 7):
        precision / recall of predicting which members are flagged at the largest FPR
        from features A-D; None when too few members are (un)exposed.
    info : dict
        Sizes, model identities, timings.
    warnings : list of str
        What was skipped or degraded, and why.
    neighbour_examples : pandas.DataFrame or None
        When ``neighbourhood`` ran: the members it scores highest, each followed by
        its neighbours (``sample_id``, ``text_hash``, ``kind`` = sample / neighbour,
        ``text``, ``energy`` in nats under the target). Holds raw text: loggers
        write it only when asked to log texts.
    """

    config: AuditConfig
    metrics: dict
    samples: object
    attacks: dict
    user_attacks: dict
    population_scores: dict
    riskiest: object
    info: dict
    warnings: list = field(default_factory=list)
    exposure: object = None
    neighbour_examples: object = None

    @property
    def headline_attack(self) -> str:
        """The attack reported first: the likelihood ratio when it ran."""
        return "likelihood_ratio" if "likelihood_ratio" in self.attacks else next(iter(self.attacks))

    def summary(self) -> dict:
        """A JSON-able summary (no raw text)."""
        return {
            "config": self.config.to_dict(),
            "info": self.info,
            "metrics": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.metrics.items()},
            "warnings": list(self.warnings),
        }

    def figures(self) -> dict:
        """matplotlib Figures keyed by artifact path (``plots/roc.png``, ...). Caller closes them."""
        from mlflow_mia.plots import ScoreHistogramDisplay, plot_roc_comparison

        figs = {
            "plots/roc.png": plot_roc_comparison({n: r.roc for n, r in self.attacks.items()},
                                                 title="ROC, sample level"),
            "plots/roc_loglog.png": plot_roc_comparison({n: r.roc for n, r in self.attacks.items()}, log_scale=True,
                                                        title="ROC, sample level (log-log, low FPR)"),
        }
        if self.user_attacks:
            figs["plots/user_roc.png"] = plot_roc_comparison({n: r.roc for n, r in self.user_attacks.items()},
                                                             title="ROC, user level")
        labels = self.samples["label"].to_numpy()
        for name, report in self.attacks.items():
            scores = self.samples[f"score_{name}"].to_numpy()
            scored = ~np.isnan(scores)  # NaN: unscored samples (neighbourhood without neighbours)
            display = ScoreHistogramDisplay.from_scores(
                scores[(labels == 1) & scored], scores[(labels == 0) & scored], name=name,
                thresholds={t.alpha: t.threshold for t in report.population})
            figs[f"plots/hist_{name}.png"] = display.figure_
        return figs


def _check_inputs(pool: AuditDataset, population: PopulationSet, config: AuditConfig, reference,
                  generator=None) -> None:
    unknown = [a for a in config.attacks if a not in ATTACKS]
    if unknown:
        raise ValueError(f"unknown attack(s) {unknown}; registered attacks: {sorted(ATTACKS)}")
    needs_reference = [a for a in config.attacks if "reference" in ATTACKS[a].requires]
    if needs_reference and reference is None:
        raise ValueError(
            f"attack(s) {needs_reference} need a reference model trained on similar but disjoint data; "
            "pass reference=... (or drop them, e.g. attacks=['loss'])")
    needs_neighbours = [a for a in config.attacks if {"neighbour_energy", "neighbour_local"} & set(ATTACKS[a].requires)]
    if needs_neighbours and reference is None and generator is None and config.neighbourhood.generator_model is None:
        raise ValueError(
            f"attack(s) {needs_neighbours} need a generator masked LM to propose neighbours; pass generator=... "
            "or reference=..., or set neighbourhood.generator_model to a local model folder")
    n_members = int(pool.labels.sum())
    if n_members == 0 or n_members == len(pool):
        which = "non-members (label 0)" if n_members else "members (label 1)"
        raise ValueError(f"the target pool has no {which}; an audit needs both members and non-members")
    if population is None:
        raise ValueError(
            "a population set is required: samples from the same distribution as the members, disjoint from the "
            "pool, used to set thresholds (Mireshghallah et al. 2022, Sec. 2.4). Pass population=PopulationSet(...)")
    alpha = min(config.metrics.fprs)
    needed = min_population_size(alpha)
    if len(population) < needed:
        raise ValueError(
            f"the population set has {len(population)} samples; a threshold at FPR {fmt_alpha(alpha)} needs at "
            f"least {needed}. Add population data or drop that rate from fprs")
    overlap = set(pool.text_hashes) & set(population.text_hashes)
    if overlap:
        raise ValueError(f"{len(overlap)} text(s) are both in the target pool and the population set; "
                         "the population must be disjoint from the pool")


def _report(name, y_true, y_score, pop_scores, config: AuditConfig, *, lengths=None) -> AttackReport:
    mc = config.metrics
    curve = roc(y_true, y_score)
    tprs = {a: tpr_at_fpr_from_roc(curve, a) for a in mc.fprs}
    population = population_threshold_metrics(y_true, y_score, pop_scores, alphas=mc.fprs) \
        if pop_scores is not None and len(pop_scores) >= min_population_size(min(mc.fprs)) else ()
    ci = {}
    if mc.bootstrap_rounds:
        stats = {"auc": auc_statistic, **{f"tpr_at_fpr_{fmt_alpha(a)}": tpr_at_fpr_statistic(a) for a in mc.fprs}}
        ci = bootstrap_ci(y_true, y_score, statistics=stats, rounds=mc.bootstrap_rounds,
                          confidence=mc.confidence, seed=mc.seed)
    mu = metrics_at_threshold(y_true, y_score, threshold=mu_threshold(y_true, y_score)) if name == "loss" else None
    bins = length_breakdown(y_true, y_score, lengths, bins=mc.length_bins) if lengths is not None else []
    return AttackReport(name=name, roc=curve, tpr_at_fpr=tprs, population=tuple(population), ci=ci, mu=mu,
                        lengths=bins)


def run_audit(target, pool: AuditDataset, population: PopulationSet, *, reference=None, generator=None,
              config: AuditConfig | None = None, cache: SignalCache | str | None = None, device=None,
              progress: bool = True) -> AuditResult:
    """Audit a target masked LM for membership leakage.

    Parameters
    ----------
    target : MaskedLM, (model, tokenizer) or str
        The model under audit (a local folder for a str).
    pool : AuditDataset
        Members (label 1) and non-members (label 0) of the target's training data.
    population : PopulationSet
        Samples from the general distribution, disjoint from the pool; only used for
        thresholds. Needs at least ``ceil(1 / min(fprs))`` samples.
    reference : MaskedLM, (model, tokenizer) or str, optional
        A model trained on similar but disjoint data; required by ``likelihood_ratio``.
    generator : MaskedLM, (model, tokenizer) or str, optional
        The masked LM proposing neighbours for ``neighbourhood`` (Mattern et al.
        2023, Sec. 3). Precedence: this argument, then
        ``config.neighbourhood.generator_model`` (a local folder), then ``reference``.
    config : AuditConfig, optional
        Attacks, signal and metric settings (defaults: loss and likelihood ratio,
        energy with K=10 masks at 15%, FPRs 0.1/0.01/0.001).
    cache : SignalCache or str, optional
        Signal cache (or its directory): re-runs and shared references cost nothing.
    device : str, optional
        Default: CUDA when available, else CPU.

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        Before any model runs: unknown attacks, a missing reference, a pool with one
        class, a missing or too small population set, pool and population overlap.
    """
    config = config or AuditConfig()
    target = as_masked_lm(target, role="target")
    reference = None if reference is None else as_masked_lm(reference, role="reference")
    if isinstance(cache, str):
        cache = SignalCache(cache)
    generator = None if generator is None else as_masked_lm(generator, role="neighbour generator")
    _check_inputs(pool, population, config, reference, generator)
    needs_reference = any("reference" in ATTACKS[a].requires for a in config.attacks)
    t0 = time.perf_counter()
    texts = list(pool.texts) + list(population.texts)
    n_pool = len(pool)
    timings = {}
    signals = {}
    for role, lm in (("target", target), ("reference", reference if needs_reference else None)):
        if lm is None:
            continue
        start = time.perf_counter()
        signals[role] = compute_signals(lm, texts, config.signal, cache=cache, device=device, progress=progress,
                                        desc=f"{config.signal.kind} of {role}")
        timings[f"signals_{role}_s"] = round(time.perf_counter() - start, 3)
    neighbour_energy, neighbour_local, generator_id = None, None, None
    needs = {r for a in config.attacks for r in ATTACKS[a].requires}
    if needs & {"neighbour_energy", "neighbour_local"}:
        from mlflow_mia.signals.neighbours import neighbour_energies

        start = time.perf_counter()
        # An explicitly given or configured generator wins over the reference model.
        if generator is None and config.neighbourhood.generator_model is None:
            generator = reference
        generator_id = generator.model_id if generator is not None else config.neighbourhood.generator_model
        if "neighbour_energy" in needs:
            neighbour_energy = neighbour_energies(target, texts, generator=generator, config=config, cache=cache,
                                                  device=device, progress=progress)
        if "neighbour_local" in needs:
            from mlflow_mia.signals.neighbour_local import audit_local_scores

            neighbour_local = audit_local_scores(target, texts, generator, config, cache=cache, device=device)
        timings["neighbours_s"] = round(time.perf_counter() - start, 3)
    warnings: list[str] = []
    target_sig = signals["target"]
    quality_metrics = {}
    if neighbour_energy is not None or neighbour_local is not None:
        from mlflow_mia.signals.generator_quality import check_generator

        quality = check_generator(target, generator if generator is not None else config.neighbourhood.generator_model,
                                  list(pool.texts), pool.labels, target_sig.energy[:n_pool], list(population.texts),
                                  config=config, cache=cache, device=device)
        quality_metrics = quality.metrics()
        if quality.warning():
            warnings.append(quality.warning())
    if target_sig.n_truncated:
        warnings.append(f"{target_sig.n_truncated} sample(s) longer than the model limit were truncated")

    def inputs(index) -> AttackInputs:
        return AttackInputs(
            texts=tuple(texts[i] for i in index),
            target=target_sig.take(index),
            reference=signals["reference"].take(index) if "reference" in signals else None,
            neighbour_energy=None if neighbour_energy is None else neighbour_energy[index],
            neighbour_local=None if neighbour_local is None else neighbour_local[index])

    pool_idx, pop_idx = np.arange(n_pool), np.arange(n_pool, len(texts))
    pool_inputs, pop_inputs = inputs(pool_idx), inputs(pop_idx)
    y = pool.labels.astype(np.int64)
    n_tokens = target_sig.n_tokens[:n_pool]

    import pandas as pd

    samples = pd.DataFrame({
        "sample_id": list(pool.sample_ids), "text_hash": list(pool.text_hashes), "label": y,
        "group": list(pool.groups) if pool.groups is not None else None,
        "n_tokens": n_tokens, "truncated": target_sig.truncated[:n_pool]})
    attacks, user_attacks, pop_scores, risky, unscored = {}, {}, {}, [], {}
    for name in config.attacks:
        attack = get_attack(name)
        scores, pscores = attack(pool_inputs, config), attack(pop_inputs, config)
        nan_pool, nan_pop = np.isnan(scores), np.isnan(pscores)
        nan_rows = int(nan_pool.sum() + nan_pop.sum())
        if nan_rows and not getattr(attack, "allows_nan", False):
            raise ValueError(f"attack {name!r} produced {nan_rows} NaN score(s); nothing scoreable for those rows")
        if getattr(attack, "allows_nan", False):
            # e.g. neighbourhood: a sample with no replaceable word has no neighbours and no score.
            unscored[name] = nan_rows
            if nan_rows:
                warnings.append(f"attack {name!r} could not score {nan_rows} sample(s) ({int(nan_pool.sum())} in the "
                                f"pool, {int(nan_pop.sum())} in the population); they are left out of its metrics")
        keep = np.flatnonzero(~nan_pool)
        y_k, scores_k, pscores_k = y[keep], scores[keep], pscores[~nan_pop]
        report = _report(name, y_k, scores_k, pscores_k, config, lengths=n_tokens[keep])
        attacks[name], pop_scores[name] = report, pscores
        samples[f"score_{name}"] = scores
        for t in report.population:
            samples[f"flagged_{name}_fpr_{fmt_alpha(t.alpha)}"] = scores > t.threshold
        if report.population:
            lowest = report.population[-1]
            idx = keep[riskiest_records(y_k, scores_k, threshold=lowest.threshold, top=config.metrics.top_records)]
            risky.append(samples.iloc[idx][["sample_id", "text_hash", "group", "n_tokens"]].assign(
                attack=name, score=scores[idx], flagged_at_fpr=lowest.alpha))
        if pool.groups is not None:
            g = group_scores(y_k, scores_k, np.asarray(pool.groups)[keep])
            user_pop = None
            if population.groups is not None:
                user_pop = group_scores(np.zeros(len(pscores_k), dtype=np.int64), pscores_k,
                                        np.asarray(population.groups)[~nan_pop]).y_score
            user_attacks[name] = _report(name, g.y_true, g.y_score, user_pop, config)
    if pool.groups is not None and population.groups is None:
        warnings.append("user-level thresholds skipped: the population set has no group column")
    metrics: dict[str, float] = {}
    for name, report in attacks.items():
        metrics.update(report.metrics(f"{name}/"))
    for name, report in user_attacks.items():
        metrics.update(report.metrics(f"user/{name}/"))
    metrics.update({f"{name}/n_unscored": count for name, count in unscored.items()})
    metrics.update(quality_metrics)
    metrics.update({"n_members": int(y.sum()), "n_non_members": int((y == 0).sum()),
                    "n_population": len(population), "n_truncated": target_sig.n_truncated})
    if user_attacks:
        g = group_scores(y, np.zeros(n_pool), pool.groups)
        metrics.update({"user/n_members": int(g.y_true.sum()), "user/n_non_members": int((g.y_true == 0).sum())})
    examples = None
    if "neighbourhood" in attacks:
        examples = _neighbour_examples(target, generator, pool, samples, target_sig.energy[:n_pool], config,
                                       cache=cache, device=device)
    headline = "likelihood_ratio" if "likelihood_ratio" in attacks else next(iter(attacks))
    exposure = _exposure(target, pool, samples, attacks[headline], headline, config, warnings)
    timings["total_s"] = round(time.perf_counter() - t0, 3)
    info = {
        "target_model": target.model_id, "target_name": target.name,
        "reference_model": reference.model_id if reference is not None else None,
        "reference_name": reference.name if reference is not None else None,
        "n_pool": n_pool, "n_population": len(population), "timings": timings,
    }
    if generator_id is not None:
        info["neighbour_generator"] = generator_id
    riskiest = pd.concat(risky, ignore_index=True) if risky else pd.DataFrame(
        columns=["sample_id", "text_hash", "group", "n_tokens", "attack", "score", "flagged_at_fpr"])
    log.info("audit done in %.1f s: %s", timings["total_s"],
             ", ".join(f"{n} AUC {r.roc.auc:.3f}" for n, r in attacks.items()))
    return AuditResult(config=config, metrics=metrics, samples=samples, attacks=attacks, user_attacks=user_attacks,
                       population_scores=pop_scores, riskiest=riskiest, info=info, warnings=warnings,
                       exposure=exposure, neighbour_examples=examples)


def _neighbour_examples(target: MaskedLM, generator, pool: AuditDataset, samples, energy, config: AuditConfig, *,
                        cache, device, n_samples: int = 5, n_neighbours: int = 5):
    """The ``n_samples`` members the neighbourhood attack scores highest, with their first neighbours.

    ``energy`` holds the pool's target energies. Neighbours and their energies come
    from the cache the attack just filled (recomputed for these few texts without a
    cache).
    """
    import pandas as pd

    from mlflow_mia.signals.neighbours import generate_neighbours

    scores = samples["score_neighbourhood"].to_numpy()
    members = np.flatnonzero((samples["label"].to_numpy() == 1) & ~np.isnan(scores))
    top = members[np.argsort(-scores[members], kind="stable")[:n_samples]]
    if not len(top):
        return None
    sc = config.signal
    texts = [pool.texts[i] for i in top]
    neighbours = generate_neighbours(generator if generator is not None else config.neighbourhood.generator_model,
                                     texts, config=config.neighbourhood, seed=sc.seed, device=device,
                                     progress=False, cache=cache, max_length=sc.max_length,
                                     token_budget=sc.token_budget)
    shown = [nb[:n_neighbours] for nb in neighbours]
    flat = [x for nb in shown for x in nb]
    keys = ([samples["text_hash"].iat[i] for i, nb in zip(top, shown) for _ in nb]
            if config.neighbourhood.shared_masks else None)
    theirs = iter(compute_signals(target, flat, sc, cache=cache, device=device, progress=False,
                                  mask_keys=keys).energy)
    rows = []
    for i, text, e, nb in zip(top, texts, energy[top], shown):
        base = {"sample_id": samples["sample_id"].iat[i], "text_hash": samples["text_hash"].iat[i]}
        rows.append({**base, "kind": "sample", "text": text, "energy": float(e),
                     "score_neighbourhood": float(scores[i])})
        rows += [{**base, "kind": "neighbour", "text": x, "energy": float(next(theirs)),
                  "score_neighbourhood": float("nan")} for x in nb]
    return pd.DataFrame(rows)


def _exposure(target: MaskedLM, pool: AuditDataset, samples, report: AttackReport, name: str,
              config: AuditConfig, warnings: list):
    """Features A-D of the members vs whether ``name`` flags them at the largest FPR."""
    from mlflow_mia.metrics.exposure import exposure_analysis, sample_features, token_frequencies
    from mlflow_mia.signals.energy import tokenize

    if not report.population:
        return None
    widest = report.population[0]  # fprs are sorted descending
    members = np.flatnonzero(pool.labels == 1)
    scores = samples[f"score_{name}"].to_numpy()[members]
    keep = members[~np.isnan(scores)]
    exposed = samples[f"score_{name}"].to_numpy()[keep] > widest.threshold
    ids, maskable, _ = tokenize(target, [pool.texts[i] for i in keep],
                                max_length=min(config.signal.max_length or target.max_length, target.max_length))
    token_ids = [x[m] for x, m in zip(ids, maskable)]
    # Token frequencies from the members: the part of the training set the auditor holds.
    freq = token_frequencies(token_ids, vocab_size=max(len(target.tokenizer), int(max(map(np.max, token_ids))) + 1))
    try:
        table = exposure_analysis(sample_features([pool.texts[i] for i in keep], token_ids, freq), exposed,
                                  seed=config.metrics.seed)
    except ValueError as err:
        warnings.append(f"memorization-feature analysis skipped: {err}")
        return None
    return table.assign(attack=name, flagged_at_fpr=widest.alpha)
