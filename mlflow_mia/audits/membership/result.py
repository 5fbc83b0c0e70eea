"""What an audit returns: :class:`AttackReport` per attack and level, :class:`AttackOutcome` per attack (what
stage 2 found for it) and :class:`AuditResult` for the audit, folded from the outcomes once. All frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mlflow_mia.config import AuditConfig
from mlflow_mia.metrics.epsilon import EpsilonLowerBound
from mlflow_mia.metrics.roc import RocResult
from mlflow_mia.metrics.thresholds import ThresholdMetrics
from mlflow_mia.naming import fmt_alpha, headline_attack, nan_to_none
from mlflow_mia.plots import ScoreHistogramDisplay, plot_roc_comparison

__all__ = ["AttackReport", "AuditResult"]


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
    mean_member_loss : ThresholdMetrics or None
        Loss attack only: the metrics at the mean-member-loss threshold (the mean
        score of the members, Jagannatha et al. 2021).
    lengths : list of dict
        AUC per token-length bin (sample level only).
    epsilon : EpsilonLowerBound or None
        Empirical epsilon lower bound at the population thresholds (Jagielski et al.
        2020); None without population thresholds.
    level : {"sample", "user"}
        The rows of this report: samples, or users (group scores).
    bounds : dict of float to dict
        One-sided confidence bounds (level ``confidence``) of the TPR at each
        resolvable alpha: ``upper`` and ``lower`` (the looser of the binomial and
        the bootstrap bound on each side: what the release gate decides on),
        ``upper_binomial`` / ``lower_binomial`` (Clopper-Pearson on the member and
        the non-member units, Bonferroni-combined, so the threshold's noise is
        included), ``upper_bootstrap`` / ``lower_bootstrap`` (percentile; nan
        without bootstrap), ``upper_at_fpr`` / ``upper_at_tpr`` (the pool's rates
        at the threshold the binomial upper bound is read at).
    resampled : dict or None
        What the bootstrap resampled: ``unit`` (``"sample"``, ``"group"`` or
        ``"user"``), ``n_members`` and ``n_non_members`` (units drawn per class),
        ``rounds``, ``stratified_by_label``. None without bootstrap.
    unresolved : dict of str to str
        Rates this level cannot resolve, with the reason: ``tpr_at_fpr_<alpha>``
        (too few non-members), ``pop_fpr_<alpha>`` (too few population samples or
        groups for that threshold), ``population_thresholds`` (none at this level).
    epsilon_trials : str
        What one trial of the epsilon bound is, and so which privacy unit it bounds.
    """

    name: str
    roc: RocResult
    tpr_at_fpr: dict
    population: tuple
    ci: dict = field(default_factory=dict)
    mean_member_loss: ThresholdMetrics | None = None
    lengths: list = field(default_factory=list)
    epsilon: EpsilonLowerBound | None = None
    level: str = "sample"
    bounds: dict = field(default_factory=dict)
    resampled: dict | None = None
    unresolved: dict = field(default_factory=dict)
    epsilon_trials: str = ""

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat metrics named ``{prefix}auc``, ``{prefix}tpr_at_fpr_0.01``, ...

        Intervals end in ``_ci_low`` / ``_ci_high`` (AUC, TPR at FPR, precision and
        recall at population thresholds; those two resample the population too), the
        one-sided bounds of a TPR in ``_upper`` / ``_lower`` with their parts
        ``_upper_binomial``, ``_upper_bootstrap``, ``_lower_binomial``,
        ``_lower_bootstrap``, ``_upper_at_fpr``, ``_upper_at_tpr`` (:attr:`bounds`);
        an unresolved TPR is nan (no interval, no bounds), and the epsilon bound
        comes with ``epsilon_lower_bound_max_certifiable``.
        """
        out = {f"{prefix}auc": self.roc.auc}
        if "auc" in self.ci:
            out[f"{prefix}auc_ci_low"], out[f"{prefix}auc_ci_high"] = self.ci["auc"]
        for alpha, tpr in self.tpr_at_fpr.items():
            a = fmt_alpha(alpha)
            out[f"{prefix}tpr_at_fpr_{a}"] = tpr  # nan when unresolved (see self.unresolved)
            self._interval(out, prefix, f"tpr_at_fpr_{a}")
            for part, value in self.bounds.get(alpha, {}).items():
                out[f"{prefix}tpr_at_fpr_{a}_{part}"] = value
        for t in self.population:
            a = fmt_alpha(t.alpha)
            out[f"{prefix}precision_at_pop_fpr_{a}"] = t.precision
            out[f"{prefix}recall_at_pop_fpr_{a}"] = t.tpr
            self._interval(out, prefix, f"precision_at_pop_fpr_{a}")
            self._interval(out, prefix, f"recall_at_pop_fpr_{a}")
            out[f"{prefix}achieved_fpr_at_pop_fpr_{a}"] = t.fpr
            out[f"{prefix}threshold_at_pop_fpr_{a}"] = t.threshold
        if self.epsilon is not None:
            out[f"{prefix}epsilon_lower_bound"] = self.epsilon.epsilon
            out[f"{prefix}epsilon_lower_bound_point"] = self.epsilon.epsilon_point
            out[f"{prefix}epsilon_lower_bound_max_certifiable"] = self.epsilon.max_certifiable
        if self.mean_member_loss is not None:
            out[f"{prefix}precision_at_mean_member_loss"] = self.mean_member_loss.precision
            out[f"{prefix}recall_at_mean_member_loss"] = self.mean_member_loss.tpr
        for row in self.lengths:
            out[f"{prefix}auc_len_{row['bin']}"] = row["auc"]
        return out

    def _interval(self, out: dict, prefix: str, key: str) -> None:
        if key in self.ci:
            out[f"{prefix}{key}_ci_low"], out[f"{prefix}{key}_ci_high"] = self.ci[key]

    def statistics_record(self) -> dict:
        """How this report's intervals and bound were made, for ``audit_summary.json``.

        ``bootstrap`` (:attr:`resampled`), ``unresolved`` (metric -> reason), and
        ``epsilon``: ``trials`` (:attr:`epsilon_trials`), ``n_members`` /
        ``n_non_members`` (trials per class) and ``max_certifiable``.
        """
        eps = None
        if self.epsilon is not None:
            eps = {"trials": self.epsilon_trials, "n_members": self.epsilon.n_members,
                   "n_non_members": self.epsilon.n_non_members, "max_certifiable": self.epsilon.max_certifiable}
        return {"bootstrap": self.resampled, "unresolved": dict(self.unresolved), "epsilon": eps}


@dataclass(frozen=True, eq=False)
class AttackOutcome:
    """What stage 2 found for one attack run (one report name), built once; :class:`AuditResult` folds them.

    Attributes
    ----------
    name : str
        The report name: the attack's, or ``<attack>.<role>`` against another reference.
    scores : ndarray of shape (n_pool,), float64
        Pool scores, higher = member; NaN where the attack could not score a sample.
    population_scores : ndarray of shape (n_population,), float64
    report : AttackReport
        Sample level, over the scored samples.
    user_report : AttackReport or None
        User level (None without groups).
    flags : dict of str to ndarray of shape (n_pool,), bool
        ``flagged_<name>_fpr_<alpha>``: the pool samples above each population threshold.
    riskiest : pandas.DataFrame or None
        The riskiest members at the lowest alpha (None without a population threshold).
    unscored : int or None
        Samples (pool and population) the attack could not score, when it may leave some
        (``Attack.allows_nan``); None when it may not.
    warning : str or None
        Why some samples are left out of its metrics.
    resolved : dict
        Settings the attack resolved from the data (``Attack.record``); empty when none.
    """

    name: str
    scores: np.ndarray
    population_scores: np.ndarray
    report: AttackReport
    user_report: AttackReport | None = None
    flags: dict = field(default_factory=dict)
    riskiest: pd.DataFrame | None = None
    unscored: int | None = None
    warning: str | None = None
    resolved: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class AuditResult:
    """Everything an audit found, ready to log or to read. Frozen: a step that adds to it (the models' registry
    records, earlier notes) makes a new one with :func:`dataclasses.replace`.

    Attributes
    ----------
    config : AuditConfig
    metrics : dict of str to float
        Flat metrics with stable names: ``{attack}/auc``, ``{attack}/tpr_at_fpr_0.01``,
        ``{attack}/precision_at_pop_fpr_0.01``, ``user/{attack}/auc``, ... and counts.
    samples : pandas.DataFrame
        One row per pool sample: ``sample_id``, ``text_hash``, ``label``, ``group`` (the user id),
        ``n_tokens``, ``truncated``, ``score_{attack}``, ``flagged_{attack}_fpr_{alpha}``.
        No raw text.
    attacks : dict of str to AttackReport
        Sample-level reports.
    user_attacks : dict of str to AttackReport
        User-level reports (empty without groups).
    population_scores : dict of str to ndarray of shape (n_population,)
    riskiest : pandas.DataFrame
        Members flagged at the lowest alpha, by descending score, per attack.
    memorization_features : pandas.DataFrame or None
        Memorization-feature analysis of the headline attack (paper Sec. 4.6, Table 7):
        precision / recall of predicting which members are flagged at the largest FPR
        from features A-D; None when too few members are (un)flagged or no target
        model was at hand.
    info : dict
        Sizes, model identities, timings.
    models : dict
        Every model the audit used, by role (``target``, ``reference``,
        ``generator``): ``identity`` (the model id) and ``name``; the integrations
        add ``uri``, ``registered_model`` and ``version``. Written to ``audit_config.json``.
    warnings : tuple of str
        What was skipped or degraded, and why (a list given is kept as a tuple).
    neighbour_examples : pandas.DataFrame or None
        When ``neighbourhood`` ran: the members it scores highest, each followed by
        its neighbours (``sample_id``, ``text_hash``, ``kind`` = sample / neighbour,
        ``text``, ``energy`` in nats under the target). Holds raw text: loggers
        write it only when asked to log texts.
    """

    config: AuditConfig
    metrics: dict[str, float]
    samples: pd.DataFrame
    attacks: dict[str, AttackReport]
    user_attacks: dict[str, AttackReport]
    population_scores: dict[str, np.ndarray]
    riskiest: pd.DataFrame
    info: dict[str, Any]
    warnings: tuple[str, ...] = ()
    memorization_features: pd.DataFrame | None = None
    neighbour_examples: pd.DataFrame | None = None
    models: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "warnings", tuple(self.warnings))

    @property
    def headline_attack(self) -> str:
        """The attack reported first (:func:`mlflow_mia.naming.headline_attack`)."""
        return headline_attack(self.attacks)

    def config_record(self) -> dict:
        """What ``audit_config.json`` holds: the :class:`AuditConfig` fields and ``models``."""
        return {**self.config.to_dict(), "models": self.models}

    def summary(self) -> dict:
        """A JSON-able summary (no raw text)."""
        return {
            "config": self.config.to_dict(),
            "info": self.info,
            "metrics": nan_to_none(self.metrics),
            # per level and attack: the bootstrap unit, unresolved rates and the epsilon bound's trials
            "statistics": nan_to_none({level: {n: r.statistics_record() for n, r in reports.items()}
                                       for level, reports in (("sample", self.attacks), ("user", self.user_attacks))
                                       if reports}),
            "warnings": list(self.warnings),
        }

    def figures(self) -> dict:
        """matplotlib Figures keyed by artifact path (``plots/roc.png``, ...). Caller closes them."""
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

