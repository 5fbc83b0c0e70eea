"""Stage 2 of an audit: signals -> attack scores -> metrics -> tables. Runs no model.

Method: Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked
Language Models Using Membership Inference Attacks", Sec. 2.4 (thresholds from
population data), Sec. 3.5 (AUC, precision, recall), Table 2 (sample and user
level), Table 3 (length breakdown); TPR at low FPR as in Carlini et al. (2022),
"Membership Inference Attacks From First Principles".
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import pandas as pd

from mlflow_mia.attacks import make_attacks, required_inputs, required_roles
from mlflow_mia.audits.membership.checks import check_data, check_shadow_signals, check_signals
from mlflow_mia.audits.membership.extras import generator_check, memorization_features, neighbour_examples
from mlflow_mia.audits.membership.result import AttackOutcome, AttackReport, AuditResult
from mlflow_mia.audits.membership.signals import AuditSignals
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.metrics.aggregate import group_scores, length_breakdown, riskiest_records
from mlflow_mia.metrics.binomial import tpr_bounds_at_fpr
from mlflow_mia.metrics.bootstrap import (bootstrap_distribution, precision_at_population_threshold_statistic,
                                          recall_at_population_threshold_statistic, tpr_at_fpr_statistic)
from mlflow_mia.metrics.epsilon import epsilon_lower_bound
from mlflow_mia.metrics.roc import auc_statistic, roc, tpr_at_fpr_from_roc
from mlflow_mia.metrics.thresholds import (mean_member_loss_threshold, metrics_at_threshold,
                                           population_threshold_metrics, unresolved_reason)
from mlflow_mia.naming import fmt_alpha, headline_attack
from mlflow_mia.attacks import ATTACKS, AttackInputs

__all__ = ["score_audit", "attack_report"]

log = logging.getLogger(__name__)

_RISKY_COLUMNS = ["sample_id", "text_hash", "group", "n_tokens"]


#: How the trials of each level's epsilon lower bound relate to the privacy unit (report and summary).
EPSILON_UNITS = {
    "sample": "one trial per sample: a sample-level bound only if samples were included in training independently",
    "sample_grouped": ("one trial per sample, but membership was decided per group: at best a bound on group-level "
                       "epsilon; the user-level bound is the one that applies"),
    "user": "one trial per group (its samples' mean score): a group-level bound",
}


def attack_report(name, y_true, y_score, pop_scores, config: AuditConfig, *, lengths=None, groups=None,
                  level: str = "sample", population_note: str | None = None, pop_groups=None) -> AttackReport:
    """Metrics of one attack at one level: exact ROC, TPR at each FPR, population thresholds, CIs, epsilon.

    Parameters
    ----------
    name : str
        Attack name (``"loss"`` adds the mean-member-loss threshold).
    y_true : ndarray of shape (n,), int
        1 = member, 0 = non-member.
    y_score : ndarray of shape (n,), float
        Attack scores, higher = member.
    pop_scores : ndarray of shape (m,), float, or None
        Population scores for the thresholds; each FPR alpha gets a threshold
        only when ``m >= ceil(1 / alpha)``.
    config : AuditConfig
        Only ``config.metrics`` is read.
    lengths : ndarray of shape (n,), int, optional
        Token counts for the length breakdown.
    groups : array-like of shape (n,), optional
        Group id of each sample when membership was decided per group: every
        interval then resamples groups (members' and non-members' apart).
    level : {"sample", "user"}
        ``"user"`` when the rows are users already (group scores); names the
        units in the reasons and the epsilon bound.
    population_note : str, optional
        Why ``pop_scores`` is None (shown in place of the thresholds).
    pop_groups : array-like of shape (m,), optional
        Group of each population score: the bootstrap resamples the population's
        groups when it re-estimates the thresholds.

    Returns
    -------
    AttackReport
        A TPR at FPR alpha needs ``ceil(1 / alpha)`` non-members at this
        level: below that it is nan, without interval or bounds, and
        ``AttackReport.unresolved`` says why (as for a dropped population threshold).
        Each resolvable TPR gets one-sided bounds (:attr:`AttackReport.bounds`): the
        binomial bounds that include the threshold's noise
        (:func:`~mlflow_mia.metrics.binomial.tpr_bounds_at_fpr`, the units of
        ``groups`` as trials), the bootstrap's, and the looser of the two on each side.
    """
    if level not in ("sample", "user"):
        raise ValueError(f"level must be 'sample' or 'user', got {level!r}")
    mc = config.metrics
    curve = roc(y_true, y_score)
    n_non_members = int(np.count_nonzero(np.asarray(y_true) == 0))
    unresolved: dict[str, str] = {}
    tprs = {}
    for a in mc.fprs:
        why = unresolved_reason(n_non_members, a, unit="non-members" if level == "sample" else "non-member users")
        tprs[a] = math.nan if why else tpr_at_fpr_from_roc(curve, a)
        if why:
            unresolved[f"tpr_at_fpr_{fmt_alpha(a)}"] = why
    population = _population(y_true, y_score, pop_scores, mc.fprs, level, population_note, unresolved)
    ci, boot, resampled = {}, {}, None
    if mc.bootstrap_rounds:
        ci, boot, resampled = _intervals(y_true, y_score, tprs, population, mc, groups, level, pop_scores, pop_groups)
    bounds = {a: _bounds(y_true, y_score, a, mc.confidence, groups if level == "sample" else None, boot.get(a))
              for a, v in tprs.items() if not math.isnan(v)}
    mean_loss = (metrics_at_threshold(y_true, y_score, threshold=mean_member_loss_threshold(y_true, y_score))
                 if name == "loss" else None)
    bins = length_breakdown(y_true, y_score, lengths, bins=mc.length_bins) if lengths is not None else []
    eps = epsilon_lower_bound(population, delta=mc.delta, confidence=mc.confidence) if population else None
    trials = "user" if level == "user" else ("sample_grouped" if groups is not None else "sample")
    return AttackReport(name=name, roc=curve, tpr_at_fpr=tprs, population=tuple(population), ci=ci,
                        mean_member_loss=mean_loss, lengths=bins, epsilon=eps, level=level, bounds=bounds,
                        resampled=resampled, unresolved=unresolved, epsilon_trials=EPSILON_UNITS[trials])


def _population(y_true, y_score, pop_scores, fprs, level, note, unresolved) -> tuple:
    """Metrics at the population threshold of every alpha the population resolves; reasons for the others."""
    if pop_scores is None:
        unresolved["population_thresholds"] = note or "no population scores at this level"
        return ()
    unit = "population samples" if level == "sample" else "population groups"
    kept = []
    for a in fprs:
        why = unresolved_reason(len(pop_scores), a, unit=unit)
        if why:
            unresolved[f"pop_fpr_{fmt_alpha(a)}"] = why
        else:
            kept.append(a)
    return population_threshold_metrics(y_true, y_score, pop_scores, alphas=kept) if kept else ()


def _intervals(y_true, y_score, tprs, population, mc, groups, level, pop_scores, pop_groups):
    """Bootstrap intervals (two-sided), one-sided bounds ``{alpha: (lower, upper)}`` of the TPRs, what was resampled.

    Precision and recall at the population thresholds re-estimate the thresholds on a
    resample of the population in every round (:mod:`~mlflow_mia.metrics.population_resampling`).
    """
    stats = {"auc": auc_statistic}
    stats.update({f"tpr_at_fpr_{fmt_alpha(a)}": tpr_at_fpr_statistic(a) for a, v in tprs.items()
                  if not math.isnan(v)})
    for t in population:
        a = fmt_alpha(t.alpha)
        stats[f"precision_at_pop_fpr_{a}"] = precision_at_population_threshold_statistic(t.alpha)
        stats[f"recall_at_pop_fpr_{a}"] = recall_at_population_threshold_statistic(t.alpha)
    dist = bootstrap_distribution(y_true, y_score, statistics=stats, rounds=mc.bootstrap_rounds, seed=mc.seed,
                                  groups=groups, population=pop_scores if population else None,
                                  population_groups=pop_groups)
    ci = {k: dist.interval(k, confidence=mc.confidence) for k in stats}
    bounds = {a: (dist.lower(f"tpr_at_fpr_{fmt_alpha(a)}", confidence=mc.confidence),
                  dist.upper(f"tpr_at_fpr_{fmt_alpha(a)}", confidence=mc.confidence))
              for a, v in tprs.items() if not math.isnan(v)}
    unit = "user" if level == "user" else dist.unit
    resampled = {"unit": unit, "n_members": dist.n_member_units, "n_non_members": dist.n_non_member_units,
                 "rounds": mc.bootstrap_rounds, "stratified_by_label": True,
                 "population": ("groups" if pop_groups is not None else "rows") if population else None}
    return ci, bounds, resampled


def _bounds(y_true, y_score, alpha, confidence, groups, boot) -> dict:
    """One-sided bounds of the TPR at ``alpha``: binomial (threshold's noise included), bootstrap, and the looser.

    ``upper`` is the larger of the two upper bounds, ``lower`` the smaller of the two
    lower bounds (the binomial ones alone without a bootstrap); the keys ending in
    ``_fpr`` / ``_tpr`` are the pool's rates at the threshold the binomial upper bound is
    read at (``docs/guides/release-gate.md``, which lists these metrics).
    """
    b = tpr_bounds_at_fpr(y_true, y_score, alpha=alpha, confidence=confidence, groups=groups)
    low_boot, up_boot = boot if boot is not None else (math.nan, math.nan)
    return {"upper": float(np.nanmax([b.upper, up_boot])), "lower": float(np.nanmin([b.lower, low_boot])),
            "upper_binomial": b.upper, "lower_binomial": b.lower, "upper_bootstrap": up_boot,
            "lower_bootstrap": low_boot, "upper_at_fpr": b.upper_fpr, "upper_at_tpr": b.upper_tpr}


def attack_runs(config: AuditConfig, signals) -> list[tuple[str, str, dict]]:
    """What the audit reports: ``(report name, attack name, inputs replaced)`` per report, in config order.

    An attack with ``per_reference`` (``likelihood_ratio``) and a reference set of k >= 2
    models (``signals["references"]``) gives k reports: its own name against the first
    reference, ``<name>.<role>`` (``likelihood_ratio.reference_2``, ...) against each
    other one, whose signals replace the ``reference`` input. Every other attack: one.
    """
    refs = signals.signals.get("references")
    runs = []
    for name in config.attacks:
        if getattr(ATTACKS[name], "per_reference", False) and refs is not None and refs.k > 1:
            for role, sig in zip(refs.roles, refs.signals):
                runs.append((name if role == "reference" else f"{name}.{role}", name, {"reference": sig}))
        else:
            runs.append((name, name, {}))
    return runs


def _attack_scores(attack, signals, pool, population, *, report_name=None, replace=None):
    """Pool and population scores of one attack (an ``Attack`` with its settings); NaN rows allowed only where
    the attack says so.

    ``report_name`` (default the attack's name) names the report; ``replace`` (``{input: signals}``)
    replaces inputs (:func:`attack_runs`).

    Returns
    -------
    (scores, population_scores, resolved, unscored, warning)
        Arrays of shape (n_pool,) and (n_population,), float64; what the attack resolved from the
        data (``Attack.record``, a dict); the unscored rows (pool and population) of an attack that
        allows NaN, else None; the warning that names them, or None.

    Raises
    ------
    ValueError
        NaN scores from an attack that does not allow them.
    """
    name = report_name or attack.name
    n_pool = len(pool)
    pop_rows = np.arange(n_pool, n_pool + len(population))
    pop_inputs = _replaced(signals.inputs(pop_rows, population.texts, population="self"), pop_rows, replace)
    pool_rows = np.arange(n_pool)
    pool_inputs = _replaced(signals.inputs(pool_rows, pool.texts, population=pop_inputs), pool_rows, replace)
    scores = attack(pool_inputs)
    pscores = attack(pop_inputs)
    resolved = attack.record(pool_inputs) or {}
    if resolved:
        log.info("attack %s: %s", name, resolved)
    nan_pool, nan_pop = np.isnan(scores), np.isnan(pscores)
    nan_rows = int(nan_pool.sum() + nan_pop.sum())
    if nan_rows and not attack.allows_nan:
        raise ValueError(f"attack {name!r} produced {nan_rows} NaN score(s); nothing scoreable for those rows")
    warning = None
    if attack.allows_nan and nan_rows:
        # e.g. neighbourhood: a sample with no replaceable word has no neighbours and no score.
        warning = (f"attack {name!r} could not score {nan_rows} sample(s) ({int(nan_pool.sum())} in the "
                   f"pool, {int(nan_pop.sum())} in the population); they are left out of its metrics")
    return scores, pscores, resolved, (nan_rows if attack.allows_nan else None), warning


def _replaced(inputs, rows, replace):
    """``inputs`` with some inputs replaced by other signals' rows (``{input: SignalResult over every row}``)."""
    if not replace:
        return inputs

    given = {**inputs.given(), **{k: v.take(rows) for k, v in replace.items()}}
    population = "self" if inputs.is_population else inputs.population
    return AttackInputs(inputs.texts, population=population, **given)


def _score_attack(run, attack, signals, pool, population, config, samples, n_tokens) -> AttackOutcome:
    """Scores, sample- and user-level reports, flags and riskiest records of one attack run.

    ``samples`` is the pool table without score columns (read only).
    """
    name, _, replace = run
    scores, pscores, resolved, unscored, warning = _attack_scores(attack, signals, pool, population,
                                                                  report_name=name, replace=replace)
    y = samples["label"].to_numpy()
    keep, pop_keep = np.flatnonzero(~np.isnan(scores)), ~np.isnan(pscores)
    y_k, scores_k, pscores_k = y[keep], scores[keep], pscores[pop_keep]
    groups = np.asarray(pool.groups)[keep] if pool.groups is not None else None
    pop_groups = np.asarray(population.groups)[pop_keep] if population.groups is not None else None
    report = attack_report(name, y_k, scores_k, pscores_k, config, lengths=n_tokens[keep], groups=groups,
                           pop_groups=pop_groups)
    flags = {f"flagged_{name}_fpr_{fmt_alpha(t.alpha)}": scores > t.threshold for t in report.population}
    risky = None
    if report.population:
        lowest = report.population[-1]
        idx = keep[riskiest_records(y_k, scores_k, threshold=lowest.threshold, top=config.metrics.top_records)]
        risky = samples.iloc[idx][_RISKY_COLUMNS].assign(attack=name, score=scores[idx],
                                                         flagged_at_fpr=lowest.alpha)
    user_report = None
    if pool.groups is not None:
        users = group_scores(y_k, scores_k, groups)
        user_pop, note = None, "the population set has no group column"
        if population.groups is not None:
            # Every alpha the population's groups resolve gets its user-level threshold (each on its own).
            user_pop = group_scores(np.zeros(len(pscores_k), dtype=np.int64), pscores_k,
                                    np.asarray(population.groups)[pop_keep]).y_score
        user_report = attack_report(name, users.y_true, users.y_score, user_pop, config, level="user",
                                    population_note=note)
    return AttackOutcome(name=name, scores=scores, population_scores=pscores, report=report,
                         user_report=user_report, flags=flags, riskiest=risky, unscored=unscored, warning=warning,
                         resolved=resolved)


def _metrics(outcomes, pool: AuditDataset, population: PopulationSet, y, n_truncated: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for o in outcomes:
        metrics.update(o.report.metrics(f"{o.name}/"))
    for o in outcomes:
        if o.user_report is not None:
            metrics.update(o.user_report.metrics(f"user/{o.name}/"))
    metrics.update({f"{o.name}/n_unscored": o.unscored for o in outcomes if o.unscored is not None})
    metrics.update({"n_members": int(y.sum()), "n_non_members": int((y == 0).sum()),
                    "n_population": len(population), "n_truncated": n_truncated})
    if any(o.user_report is not None for o in outcomes):
        users = group_scores(y, np.zeros(len(pool)), pool.groups)
        metrics.update({"user/n_members": int(users.y_true.sum()),
                        "user/n_non_members": int((users.y_true == 0).sum())})
    return metrics


def _with_scores(samples: pd.DataFrame, outcomes) -> pd.DataFrame:
    """The pool table with each attack's ``score_<name>`` and ``flagged_<name>_fpr_<alpha>`` columns, in order."""
    columns = {}
    for o in outcomes:
        columns[f"score_{o.name}"] = o.scores
        columns.update(o.flags)
    return pd.concat([samples, pd.DataFrame(columns, index=samples.index)], axis=1) if columns else samples


def score_audit(signals: AuditSignals, pool: AuditDataset, population: PopulationSet,
                config: AuditConfig | None = None, *,
                notes=()) -> AuditResult:
    """Score precomputed signals: attacks -> metrics -> tables. Runs no model.

    Parameters
    ----------
    signals : AuditSignals
        From :func:`~mlflow_mia.audits.membership.compute_audit_signals`, or built from arrays
        computed anywhere: one row per pool text, then one per population text. The
        tables that read beyond the scores (memorization features, neighbour
        examples, the generator check) read ``signals.extras``; without them each is
        skipped with a warning, and the metrics do not depend on them.
    pool : AuditDataset
        Members (label 1) and non-members (label 0).
    population : PopulationSet
        Disjoint from the pool; only used for thresholds.
    config : AuditConfig, optional
        Attacks and metric settings; must be the config the signals were computed with.
    notes : sequence of str
        Warnings from earlier checks, put first in ``AuditResult.warnings``.

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        Unknown attacks; a pool with one class; a missing, too small or overlapping
        population set; signals missing an input an attack needs, with a row count
        other than ``n_pool + n_population``, or whose text hashes do not match the data; a
        ``shadow_membership`` whose IN shadows fit the population texts resolved worse than the OUT
        ones (the shadow record IN/OUT direction check,
        :func:`~mlflow_mia.audits.membership.checks.check_shadow_signals`; its figures go to
        ``info["shadow_direction"]``).
    """
    config = config or AuditConfig()
    required_inputs(config.attacks)  # unknown attacks fail first
    notes = list(notes) + check_data(pool, population, config)
    return score_checked(signals, pool, population, config, notes=notes)


def score_checked(signals, pool: AuditDataset, population: PopulationSet, config: AuditConfig, *,
                  notes=(), attacks: dict | None = None, started: float | None = None) -> AuditResult:
    """:func:`score_audit` on data :func:`~mlflow_mia.audits.membership.checks.check_data` has passed (``run_audit``'s stage 2).

    Only the signals are checked against the data here (:func:`~mlflow_mia.audits.membership.checks.check_signals`).
    ``attacks``: ``{name: Attack}`` of every attack of ``config``, built with its settings
    (:func:`~mlflow_mia.attacks.make_attacks`); default: built here from ``config``. ``started``: the
    ``time.perf_counter()`` the whole audit started at, for ``info["timings"]["total_s"]``. Each attack run
    gives one frozen :class:`~mlflow_mia.audits.membership.result.AttackOutcome`; the result is folded from
    them once.
    """
    t0 = time.perf_counter()
    if attacks is None:
        attacks = make_attacks(config)
    check_signals(signals, pool, population, config.attacks)
    direction = check_shadow_signals(signals, len(pool), population)  # a swapped shadow record stops here
    for note in notes:
        log.warning(note)
    n_pool = len(pool)
    target = signals.target
    y = pool.labels.astype(np.int64)
    n_tokens = target.n_tokens[:n_pool]
    groups = pool.groups
    table = pd.DataFrame({
        "sample_id": list(pool.sample_ids or ()), "text_hash": list(pool.text_hashes), "label": y,
        "group": list(groups) if groups is not None else None,
        "n_tokens": n_tokens, "truncated": target.truncated[:n_pool]})
    n_truncated = target.n_truncated
    outcomes = tuple(_score_attack(run, attacks[run[1]], signals, pool, population, config, table, n_tokens)
                     for run in attack_runs(config, signals))
    samples = _with_scores(table, outcomes)
    reports = {o.name: o.report for o in outcomes}
    warnings = [*notes, *([f"{n_truncated} sample(s) longer than the model limit were truncated"] if n_truncated
                          else []), *(o.warning for o in outcomes if o.warning)]
    if pool.groups is not None and population.groups is None:
        warnings.append("user-level thresholds skipped: the population set has no group column")
    metrics = _metrics(outcomes, pool, population, y, n_truncated)
    extras = signals.extras
    needs, values = required_inputs(config.attacks), target.values[:n_pool]
    examples = None  # the extras below add their reasons for skipping a table to this (local) warnings list
    if "neighbour_values" in needs:
        examples = neighbour_examples(extras, pool, samples, values, needs["neighbour_values"][0],
                                      warnings=warnings)
    if "generator" in required_roles(config.attacks):
        metrics.update(generator_check(extras, pool, values, warnings=warnings))
    headline = headline_attack(reports)
    features = memorization_features(extras, pool, samples, reports[headline], headline, config, warnings)
    record = dict(signals.info.get("models", {}))
    engine = {"engine": signals.info["engine"]} if signals.info.get("engine") else {}
    resolved = {o.name: o.resolved for o in outcomes if o.resolved}
    settings = {"attack_settings": resolved} if resolved else {}
    if direction is not None:
        settings["shadow_direction"] = direction
    now = time.perf_counter()
    timings = {**signals.info.get("timings", {}), "scoring_s": round(now - t0, 3)}
    if started is not None:
        timings["total_s"] = round(now - started, 3)
    info = {**_identity_info(record), **engine, **settings, "n_pool": n_pool, "n_population": len(population),
            "timings": timings}
    risky = [o.riskiest for o in outcomes if o.riskiest is not None]
    riskiest = pd.concat(risky, ignore_index=True) if risky else pd.DataFrame(
        columns=_RISKY_COLUMNS + ["attack", "score", "flagged_at_fpr"])
    log.info("audit scored: %s", ", ".join(f"{n} AUC {r.roc.auc:.3f}" for n, r in reports.items()))
    return AuditResult(config=config, metrics=metrics, samples=samples, attacks=reports,
                       user_attacks={o.name: o.user_report for o in outcomes if o.user_report is not None},
                       population_scores={o.name: o.population_scores for o in outcomes},
                       riskiest=riskiest, info=info, warnings=tuple(warnings), memorization_features=features,
                       neighbour_examples=examples, models=record)


def _identity_info(record: dict) -> dict:
    """``AuditResult.info``'s model keys from the models record (``target_model``, ``target_name``, ...)."""
    target, reference = record.get("target") or {}, record.get("reference") or {}
    info = {"target_model": target.get("identity"), "target_name": target.get("name"),
            "reference_model": reference.get("identity"), "reference_name": reference.get("name")}
    if record.get("generator"):
        info["neighbour_generator"] = record["generator"]["identity"]
    return info
