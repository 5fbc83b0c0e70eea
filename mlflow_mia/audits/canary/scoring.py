"""Stage 2 of the canary audit: how much a model leaks about records planted with independent inclusion bits.

:func:`score_canaries` scores every canary of a :class:`~mlflow_mia.canaries.CanarySet`
from its stage-1 signals (:class:`~mlflow_mia.audits.canary.signals.CanarySignals`: energy or
pseudo-log-likelihood under the target) through the attack registry
(:data:`mlflow_mia.attacks.ATTACKS`): ``loss``, or with a reference model
``likelihood_ratio`` (Mireshghallah et al. 2022), each canary's score centred on its
template's median score (:func:`centre_by_template`); then reports per repetition count r
(and over all canaries):

- included vs excluded canaries: AUC and TPR at each FPR, with percentile bootstrap
  intervals that resample canaries by inclusion bit (the unit: one canary). A TPR at FPR
  alpha needs ``ceil(1 / alpha)`` excluded canaries (units: r copies of one canary are
  one unit), the rule of the membership audit
  (:func:`~mlflow_mia.metrics.thresholds.unresolved_reason`): with fewer it is nan,
  without interval, and :attr:`CanaryAuditResult.unresolved` says why;
- exposure of the secret-format canaries (Carlini et al. 2019, Sec. 4; bits): the rank
  of the true secret among candidates of its format, ties counted against it. Every
  candidate is scored when the space has at most ``n_candidates`` secrets (exact rank,
  the headline); else a uniform sample is scored, the headline is the skew-normal
  extrapolation of Sec. 4.3, and the rank estimate, capped at the sample's resolution
  ``log2(n_candidates + 1)`` (a lower bound where capped), is reported beside it
  (:mod:`mlflow_mia.metrics.exposure`); mean and median over included and excluded canaries;
- the one-run epsilon lower bound (Steinke, Nasr, Jagielski 2023) of the canaries with
  that r over the numbers of guesses of :func:`~mlflow_mia.metrics.one_run.sparse_guess_grid`
  (5 %, 20 % and 100 % of the canaries, fixed in advance); its unit is one canary, i.e. a group of r records. The canaries inserted once
  give the record-level bound (``canary/epsilon_lower_bound``).

References
----------
.. [1] N. Carlini et al., "The Secret Sharer", USENIX Security 2019, Sec. 4.
.. [2] T. Steinke, M. Nasr, M. Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023.
.. [3] F. Mireshghallah et al., "Quantifying Privacy Risks of Masked Language Models Using Membership
   Inference Attacks", EMNLP 2022.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd

from mlflow_mia.attacks import ATTACKS, AttackInputs
from mlflow_mia.audits.canary.signals import CanarySignals
from mlflow_mia.canaries import CanarySet
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.metrics.bootstrap import bootstrap_ci, tpr_at_fpr_statistic
from mlflow_mia.metrics.exposure import ExposureResult, exposure
from mlflow_mia.metrics.one_run import OneRunBound, one_run_audit, sparse_guess_grid
from mlflow_mia.metrics.roc import RocResult, auc_statistic, roc, tpr_at_fpr_from_roc
from mlflow_mia.metrics.thresholds import unresolved_reason
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.signals.types import SignalResult

__all__ = ["CanaryAuditResult", "score_canaries"]


@dataclass
class CanaryAuditResult:
    """What the canary audit found (:func:`score_canaries`, :func:`~mlflow_mia.audits.canary.run.canary_audit`).

    Attributes
    ----------
    metrics : dict of str to float
        ``canary/auc``, ``canary/r{r}/auc``, ``canary/r{r}/tpr_at_fpr_{alpha}`` (+ ``_ci_low``,
        ``_ci_high``; nan without interval when unresolved), per repetition count (and over
        all canaries, ``canary/...``) the headline exposure in bits:
        ``exposure_mean`` (included secret-format canaries), ``exposure_median``,
        ``exposure_upper`` (one-sided bootstrap bound of the mean),
        ``exposure_excluded_mean``, ``exposure_extrapolated_mean`` (the skew-normal
        estimate where candidates were sampled), ``exposure_n_extrapolated`` (included
        canaries whose headline is that estimate); the rank-based exposure beside it:
        ``exposure_rank_mean``, ``exposure_rank_upper`` and ``exposure_rank_n_capped``
        (included canaries whose sampled estimate holds the cap ``log2(n_candidates + 1)``:
        when above 0 the rank mean is a lower bound, shown ``>=``);
        ``canary/r{r}/epsilon_lower_bound`` (unit: one canary of r records) with
        ``epsilon_n_guesses``, ``epsilon_n_correct``, ``epsilon_max``, and the
        record-level ``canary/epsilon_lower_bound`` (the r = 1 canaries).
    table : pandas.DataFrame
        One row per repetition count (and ``all``): the same numbers.
    scores : ndarray of shape (m,)
        Attack score of each canary (higher = more likely included).
    exposure : ndarray of shape (m,)
        Headline exposure (bits) of each secret-format canary (:attr:`ExposureResult.headline`:
        the exact rank's, or the skew-normal extrapolation with sampled candidates), nan
        for the others.
    exposure_rank : ndarray of shape (m,)
        Rank-based exposure (bits): the exact rank's, or the sampled estimate capped at
        ``log2(n_candidates + 1)``; nan for canaries that are not secret-format.
    exposure_capped : ndarray of shape (m,), bool
        Where ``exposure_rank`` holds the cap (a lower bound).
    exposure_extrapolated : ndarray of shape (m,)
    exposures : dict of str to ExposureResult
        By template id.
    bounds : dict of str to OneRunBound
        ``"r1"``, ``"r2"``, ... and ``"all"``.
    rocs : dict of str to RocResult
        Included vs excluded canaries, same keys.
    attack : {"loss", "likelihood_ratio"}
    config : CanaryAuditConfig
    counts : dict of str to int
        :meth:`CanarySet.counts`.
    models : dict
        ``{role: {"identity": ..., "name": ...}}``; the reference also has ``"weights"``
        (its weights digest, which the gate record names).
    warnings : list of str
    unresolved : dict of str to str
        Metric name (``canary/r{r}/tpr_at_fpr_{alpha}``) -> why it is nan (too few
        excluded canaries to resolve that FPR).
    """

    metrics: dict
    table: object
    scores: np.ndarray
    exposure: np.ndarray
    exposure_rank: np.ndarray
    exposure_capped: np.ndarray
    exposure_extrapolated: np.ndarray
    exposures: dict
    bounds: dict
    rocs: dict
    attack: str
    config: CanaryAuditConfig
    counts: dict
    models: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    unresolved: dict = field(default_factory=dict)

    @property
    def record_level_epsilon(self) -> float:
        """The one-run bound of the canaries inserted once (nan when there are none)."""
        return float(self.metrics.get("canary/epsilon_lower_bound", math.nan))


def _roc_metrics(prefix: str, bits, scores, config: CanaryAuditConfig, seed: int, out: dict,
                 unresolved: dict) -> RocResult:
    """AUC and TPR at each FPR of included vs excluded canaries, with bootstrap intervals, into ``out``.

    A TPR at FPR alpha read from fewer than ``ceil(1 / alpha)`` excluded canaries (one
    canary = one unit, whatever its repetitions) is nan, gets no interval, and its reason
    goes into ``unresolved``.
    """
    result = roc(bits, scores)
    out[f"{prefix}/auc"] = result.auc
    stats = {"auc": auc_statistic}
    n_excluded = int(np.count_nonzero(bits == 0))
    for alpha in config.fprs:
        key = f"tpr_at_fpr_{fmt_alpha(alpha)}"
        why = unresolved_reason(n_excluded, alpha, unit="excluded canaries")
        if why:
            out[f"{prefix}/{key}"], unresolved[f"{prefix}/{key}"] = math.nan, why
            continue
        out[f"{prefix}/{key}"] = tpr_at_fpr_from_roc(result, alpha)
        stats[key] = tpr_at_fpr_statistic(alpha)
    if config.bootstrap_rounds and bits.min() != bits.max():
        cis = bootstrap_ci(bits, scores, statistics=stats, rounds=config.bootstrap_rounds,
                           confidence=config.confidence, seed=seed)
        for name, (low, high) in cis.items():
            out[f"{prefix}/{name}_ci_low"], out[f"{prefix}/{name}_ci_high"] = low, high
    return result


def _mean_bounds(values: np.ndarray, *, rounds: int, confidence: float, seed: int) -> tuple[float, float]:
    """One-sided percentile-bootstrap lower and upper bounds of the mean (resampling canaries), each at ``confidence``.

    ``(nan, nan)`` with fewer than 2 canaries or without a bootstrap: one canary's value is no
    evidence about the mean, so a gate can neither pass nor fail on it.
    """
    if values.size < 2 or rounds == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(rounds, values.size))].mean(axis=1)
    low, high = np.quantile(means, [1.0 - confidence, confidence])
    return float(low), float(high)


class _Exposures(NamedTuple):
    """Per canary (shape (m,)): headline and rank-based exposure (bits), the cap flag, the skew-normal
    estimate, whether the headline is that estimate; and the :class:`ExposureResult` of each template."""

    headline: np.ndarray
    rank_based: np.ndarray
    capped: np.ndarray
    extrapolated: np.ndarray
    from_extrapolation: np.ndarray
    by_template: dict


def _exposures(canaries: CanarySet, signal: np.ndarray, candidates: dict, warnings: list) -> _Exposures:
    """Exposure of every secret-format canary, from the candidates' signals of stage 1 (no model runs).

    Returns an :class:`_Exposures`: arrays of shape (m,) (nan, or False, for canaries
    without an exposure) and the :class:`ExposureResult` of each template.

    A template whose candidates all score the same (a tokenizer that maps every secret to
    the same tokens, e.g. [UNK]) gets no exposure (nan) and a warning: with ties against
    the secret it would read as 0 bits, and the skew-normal cannot be fitted; a number
    about the tokenizer, not the model.
    """
    m = len(canaries)
    out = _Exposures(headline=np.full(m, np.nan), rank_based=np.full(m, np.nan), capped=np.zeros(m, dtype=bool),
                     extrapolated=np.full(m, np.nan), from_extrapolation=np.zeros(m, dtype=bool), by_template={})
    tids = np.array(canaries.template_ids)
    for template in (t for t in canaries.templates if t.id in candidates):
        rows = np.flatnonzero((tids == template.id) & canaries.is_secret_format)
        cand, exact = candidates[template.id]
        if np.ptp(cand) == 0:
            warnings.append(f"template {template.id}: every candidate secret has the same score (the tokenizer "
                            "does not tell the secrets apart, e.g. digits read as [UNK]); no exposure for it")
            continue
        res: ExposureResult = exposure(signal[rows], cand, space_size=template.space_size, exact=exact)
        out.headline[rows], out.rank_based[rows], out.capped[rows] = res.headline, res.exposure, res.capped
        out.extrapolated[rows], out.from_extrapolation[rows] = res.extrapolated, res.headline_is_extrapolated
        out.by_template[template.id] = res
    return out


def attack_scores(target, reference, canaries: CanarySet, config: CanaryAuditConfig) -> tuple[str, np.ndarray]:
    """``(attack, scores)`` of every canary, from the registered attack (:data:`mlflow_mia.attacks.ATTACKS`).

    ``loss`` without a reference (score ``-E(s; theta)``, Yeom et al. 2018), ``likelihood_ratio``
    with one (``E(s; theta_R) - E(s; theta)``, Mireshghallah et al. 2022, Eq. 1-2): the attacks of
    the membership audit, read from :class:`~mlflow_mia.attacks.AttackInputs` over the canary texts.

    Parameters
    ----------
    target : ndarray of shape (m,), float64
        Signal of each canary under the target (nats; lower = likelier).
    reference : ndarray of shape (m,) or None
        The same under the reference model.
    canaries : CanarySet
        Its texts are the rows (kept in memory only).
    config : CanaryAuditConfig
        Its signal kind labels the signals (:meth:`~mlflow_mia.canaries.config.CanaryAuditConfig.signal_config`).

    Returns
    -------
    attack : {"loss", "likelihood_ratio"}
    scores : ndarray of shape (m,), float64
        Higher = more likely included.
    """
    kind, m = config.signal_config().kind, len(canaries)
    signal = {"target": SignalResult.from_arrays(target, n_tokens=np.zeros(m, np.int64), kind=kind)}
    if reference is not None:  # token counts are not part of the canary signals (neither attack reads them)
        signal["reference"] = SignalResult.from_arrays(reference, n_tokens=np.zeros(m, np.int64), kind=kind)
    attack = "likelihood_ratio" if reference is not None else "loss"
    return attack, ATTACKS[attack]()(AttackInputs(tuple(canaries.texts), **signal))


def centre_by_template(scores: np.ndarray, template_ids) -> np.ndarray:
    """Scores minus the median score of their template's canaries (included and excluded alike).

    The fine-tune learns each template's fixed words from every included canary of it,
    so a template's canaries all move together; which template a canary comes from says
    nothing about its own inclusion bit, and ranking canaries of different templates on
    the raw score mixes that shared offset into the guesses. Centring removes it. It uses
    the scores of all canaries and never the bits, so the guesses stay a function of the
    trained model and the (public to the auditor) canary texts, as the one-run bound
    requires (Steinke et al. 2023, Sec. 3). Within a template the order is unchanged
    (exposure is not affected).

    Parameters
    ----------
    scores : ndarray of shape (m,), float
    template_ids : sequence of str, length m

    Returns
    -------
    ndarray of shape (m,), float64
    """
    scores = np.asarray(scores, dtype=np.float64)
    tids = np.asarray(template_ids)
    out = scores.copy()
    for tid in np.unique(tids):
        sel = tids == tid
        out[sel] -= np.median(scores[sel])
    return out


def check_both_classes(bits: np.ndarray) -> None:
    """Raise ValueError unless ``bits`` (0/1, shape (m,)) hold at least 2 included and 2 excluded canaries."""
    if min(bits.sum(), len(bits) - bits.sum()) < 2:
        raise ValueError(f"the canary audit needs at least 2 included and 2 excluded canaries; this set has "
                         f"{int(bits.sum())} included of {len(bits)}")


def _groups(canaries: CanarySet) -> list[tuple[str, np.ndarray]]:
    reps = canaries.repetitions
    groups = [(f"r{r}", reps == r) for r in sorted(set(reps.tolist()))]
    return groups + [("all", np.ones(len(canaries), dtype=bool))]


def score_canaries(signals: CanarySignals, canaries: CanarySet, config: CanaryAuditConfig | None = None
                   ) -> CanaryAuditResult:
    """Stage 2 of the canary audit: signals -> scores (:func:`attack_scores`), exposures, metrics and bounds; runs no model.

    Parameters
    ----------
    signals : CanarySignals
        From :func:`~mlflow_mia.audits.canary.signals.canary_signals` for the same ``canaries`` and ``config``.
    canaries : CanarySet
    config : CanaryAuditConfig, optional

    Returns
    -------
    CanaryAuditResult

    Raises
    ------
    ValueError
        Fewer than 2 included or 2 excluded canaries, or signals of another number of canaries.
    """
    config = config or CanaryAuditConfig()
    bits = canaries.included.astype(np.int64)
    check_both_classes(bits)
    signal = np.asarray(signals.target, dtype=np.float64)
    if signal.shape != (len(canaries),):
        raise ValueError(f"the signals hold {signal.shape[0]} canaries, the set {len(canaries)}: compute them with "
                         "canary_signals for this canary set")
    attack, scores = attack_scores(signal, signals.reference, canaries, config)
    scores = centre_by_template(scores, canaries.template_ids)
    models = {role: dict(record) for role, record in signals.models.items()}
    warnings: list = []
    found = _exposures(canaries, signal, signals.candidates, warnings)
    expo, ranked, capped, extra = found.headline, found.rank_based, found.capped, found.extrapolated
    secret = canaries.is_secret_format & np.isfinite(expo)
    metrics: dict[str, float] = {}
    unresolved: dict[str, str] = {}
    rows: list[dict[str, object]] = []
    bounds: dict[str, OneRunBound] = {}
    rocs: dict[str, RocResult] = {}
    for k, (name, sel) in enumerate(_groups(canaries)):
        prefix = f"canary/{name}"
        n_canaries, n_included = int(sel.sum()), int(bits[sel].sum())
        row: dict[str, object] = {"group": name, "n_canaries": n_canaries, "n_included": n_included}
        if min(n_included, n_canaries - n_included) == 0:
            warnings.append(f"{name}: every canary is {'included' if n_included else 'excluded'}; no "
                            "comparison or bound")
            rows.append(row)
            continue
        rocs[name] = _roc_metrics(prefix, bits[sel], scores[sel], config, config.seed + k, metrics, unresolved)
        inc, exc = sel & secret & (bits == 1), sel & secret & (bits == 0)
        if inc.any():
            mean_bounds = partial(_mean_bounds, rounds=config.bootstrap_rounds, confidence=config.confidence,
                                  seed=config.seed + k)
            metrics[f"{prefix}/exposure_mean"] = float(np.mean(expo[inc]))
            metrics[f"{prefix}/exposure_median"] = float(np.median(expo[inc]))
            metrics[f"{prefix}/exposure_lower"], metrics[f"{prefix}/exposure_upper"] = mean_bounds(expo[inc])
            metrics[f"{prefix}/exposure_extrapolated_mean"] = float(np.nanmean(extra[inc])) if np.isfinite(
                extra[inc]).any() else math.nan
            metrics[f"{prefix}/exposure_n_extrapolated"] = float(np.count_nonzero(found.from_extrapolation[inc]))
            metrics[f"{prefix}/exposure_rank_mean"] = float(np.mean(ranked[inc]))
            metrics[f"{prefix}/exposure_rank_lower"], metrics[f"{prefix}/exposure_rank_upper"] = mean_bounds(
                ranked[inc])
            metrics[f"{prefix}/exposure_rank_n_capped"] = float(np.count_nonzero(capped[inc]))
        if exc.any():
            metrics[f"{prefix}/exposure_excluded_mean"] = float(np.mean(expo[exc]))
        if name != "all":  # a bound's unit is one canary of r records: never mix repetition counts
            bound: OneRunBound = one_run_audit(bits[sel], scores[sel], delta=config.delta,
                                               confidence=config.confidence, seed=config.seed + k,
                                               grid=sparse_guess_grid(int(sel.sum())))
            bounds[name] = bound
            metrics[f"{prefix}/epsilon_lower_bound"] = bound.epsilon
            metrics[f"{prefix}/epsilon_n_guesses"] = float(bound.n_guesses)
            metrics[f"{prefix}/epsilon_n_correct"] = float(bound.n_correct)
            metrics[f"{prefix}/epsilon_max"] = bound.max_epsilon
        row.update({key.split("/", 2)[2]: v for key, v in metrics.items() if key.startswith(prefix + "/")})
        rows.append(row)
    for key in [k for k in metrics if k.startswith("canary/all/")]:
        metrics["canary/" + key[len("canary/all/"):]] = metrics.pop(key)
    for key in [k for k in unresolved if k.startswith("canary/all/")]:
        unresolved["canary/" + key[len("canary/all/"):]] = unresolved.pop(key)
    if "r1" in bounds:  # record level: a canary inserted once is one record
        for stat in ("epsilon_lower_bound", "epsilon_n_guesses", "epsilon_n_correct", "epsilon_max"):
            metrics[f"canary/{stat}"] = metrics[f"canary/r1/{stat}"]
    else:
        warnings.append("no canary inserted once (repetition count 1): no record-level epsilon bound")
    metrics.update({f"canary/{k}": float(v) for k, v in canaries.counts().items()})
    return CanaryAuditResult(metrics=metrics, table=pd.DataFrame(rows), scores=scores, exposure=expo,
                             exposure_rank=ranked, exposure_capped=capped, exposure_extrapolated=extra,
                             exposures=found.by_template, bounds=bounds, rocs=rocs, attack=attack, config=config,
                             counts=canaries.counts(), models=models, warnings=warnings, unresolved=unresolved)
