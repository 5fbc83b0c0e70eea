"""Scores of NER memorization prompts (Xia et al. 2025): M-MEM, ensembles, token removal.

Every function takes entity confidences, higher = more likely in-sample, and
labels with 1 = in-sample name. A matrix ``conf`` of shape ``(n_prompts, n_names)``
holds ``C_k(e)`` of prompt ``k`` and name ``e``.

- M-MEM of a prompt (Sect. 3.3) is the share of (in-sample, out-of-sample) pairs
  the prompt ranks right, ties counted one half: the ROC AUC.
- Sensitivity and robustness: gap ``max - min`` and standard deviation
  ``sqrt(mean((x - mu)^2))`` of the prompts' M-MEM.
- Ensembles (Sect. 4.1): MV (per pair, the majority vote of the prompts), AVG-C,
  WED-C (confidences weighted by each prompt's dev M-MEM), MAX-C, MIN-C.
- Prompt engineering (Sect. 4.1, 5.5): greedy word removal from the best prompt
  (remove the least important word) and the worst one (remove the most
  important), until one word besides the name remains.
- A reference tagger as a per-name reference: the log confidence ratio
  ``log C_k(e; target) - log C_k(e; reference)`` per prompt, averaged over prompts
  (:func:`confidence_log_ratio`, :func:`ratio_scores`): the likelihood-ratio idea of
  Mireshghallah et al. (2022) applied to Xia et al.'s entity confidence.

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language
   model-based named entity recognition", PLoS One 20(9), 2025.
.. [2] S. Feng et al., "Pathologies of neural models make interpretations
   difficult", EMNLP 2018 (input reduction by token removal).
.. [3] F. Mireshghallah et al., "Quantifying privacy risks of masked language
   models using membership inference attacks", EMNLP 2022, Sect. 3 (the
   likelihood ratio of a target and a reference model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.stats import kendalltau

from .bootstrap import bootstrap_ci
from .roc import auc_statistic
from .validation import check_labels
from .thresholds import metrics_at_threshold, min_population_size, population_threshold

__all__ = ["mmem", "prompt_mmem", "mmem_ci", "prompt_spread", "ensemble_scores", "ensemble_mmem",
           "greedy_token_removal", "kendall_tau", "tpr_at_dev_fpr", "confidence_log_ratio"]

ENSEMBLES = ("mv", "avg_c", "wed_c", "max_c", "min_c")
#: Confidences below this are read as this value before the log (a softmax can underflow to 0).
CONFIDENCE_FLOOR = 1e-12


def mmem(y_true, confidence) -> float:
    """M-MEM of one prompt: the ROC AUC of in-sample vs out-of-sample confidences.

    Parameters
    ----------
    y_true : array-like of shape (n_names,), 0/1
        1 = in-sample name.
    confidence : array-like of shape (n_names,), float
        ``C(e)`` of each name in the prompt.

    Returns
    -------
    float in [0, 1]
        Equal to ``sklearn.metrics.roc_auc_score(y_true, confidence)``; nan with a
        warning when a class is missing.

    >>> mmem([1, 1, 0, 0], [0.9, 0.4, 0.5, 0.1])
    0.75
    """
    return auc_statistic(y_true, confidence)


def _checked_matrix(y_true, conf) -> tuple[np.ndarray, np.ndarray]:
    labels = check_labels(y_true)
    conf = np.asarray(conf, dtype=np.float64)
    if conf.ndim != 2 or conf.shape[1] != labels.size:
        raise ValueError(f"conf must have shape (n_prompts, {labels.size}), got {conf.shape}")
    if not np.isfinite(conf).all():
        raise ValueError("conf holds NaN or infinite confidences")
    if labels.min() == labels.max():
        raise ValueError("M-MEM needs in-sample (1) and out-of-sample (0) names; got one class only")
    return labels, conf


def prompt_mmem(y_true, conf) -> np.ndarray:
    """M-MEM of every prompt at once.

    Parameters
    ----------
    y_true : array-like of shape (n_names,), 0/1
    conf : array-like of shape (n_prompts, n_names), float

    Returns
    -------
    ndarray of shape (n_prompts,), float64
        Row ``k`` equals ``mmem(y_true, conf[k])`` (:func:`~mlflow_mia.metrics.roc.auc_statistic` of each row).

    Raises
    ------
    ValueError
        Shape mismatch, non-finite confidences, or one class only.
    """
    labels, conf = _checked_matrix(y_true, conf)
    return auc_statistic(labels, conf)


def mmem_ci(y_true, confidence, *, rounds: int = 1000, confidence_level: float = 0.95,
            seed: int = 0) -> tuple[float, float]:
    """Stratified bootstrap interval of one prompt's M-MEM over names (see :func:`bootstrap_ci`)."""
    if rounds <= 0:
        return (math.nan, math.nan)
    return bootstrap_ci(y_true, confidence, statistics={"mmem": auc_statistic}, rounds=rounds,
                        confidence=confidence_level, seed=seed)["mmem"]


def prompt_spread(scores) -> dict[str, float]:
    """Gap (max - min) and standard deviation (population form) of prompt M-MEMs.

    >>> prompt_spread([0.6, 0.7, 0.8])["gap"]
    0.20000000000000007
    """
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no prompt scores")
    return {"gap": float(x.max() - x.min()), "std": float(x.std()), "mean": float(x.mean()),
            "max": float(x.max()), "min": float(x.min())}


def ensemble_scores(conf, *, weights=None) -> dict[str, np.ndarray]:
    """Per-name scores of the confidence ensembles AVG-C, WED-C, MAX-C and MIN-C.

    Parameters
    ----------
    conf : array-like of shape (n_prompts, n_names)
    weights : array-like of shape (n_prompts,), optional
        WED-C weights, the prompts' dev M-MEM (Sect. 4.1); WED-C is omitted without them.

    Returns
    -------
    dict of str to ndarray of shape (n_names,)
        ``avg_c`` = mean over prompts, ``wed_c`` = ``sum_k w_k C_k / sum_k w_k``,
        ``max_c`` / ``min_c`` = max / min over prompts.
    """
    conf = np.asarray(conf, dtype=np.float64)
    out = {"avg_c": conf.mean(axis=0), "max_c": conf.max(axis=0), "min_c": conf.min(axis=0)}
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (conf.shape[0],) or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError(f"weights must be {conf.shape[0]} finite values with a positive sum")
        out["wed_c"] = w @ conf / w.sum()
    return out


def majority_vote_mmem(y_true, conf) -> float:
    """MV ensemble: the share of (in, out) pairs that most prompts rank right.

    For each pair of an in-sample name ``i`` and an out-of-sample name ``j`` the
    prompts vote ``1`` if ``C_k(i) > C_k(j)``, ``1/2`` on a tie, ``0`` otherwise; the
    pair scores 1 when the mean vote exceeds 1/2, 1/2 when it equals 1/2, else 0.
    The MV M-MEM is the mean over pairs (Sect. 4.1).

    Returns
    -------
    float in [0, 1]
    """
    labels, conf = _checked_matrix(y_true, conf)
    ins, outs = conf[:, labels == 1], conf[:, labels == 0]
    votes = np.zeros((ins.shape[1], outs.shape[1]))
    for row_in, row_out in zip(ins, outs):  # one prompt at a time: O(n1 n0) memory
        diff = row_in[:, None] - row_out[None, :]
        votes += (diff > 0) + 0.5 * (diff == 0)
    share = votes / conf.shape[0]
    return float(np.mean(np.where(np.isclose(share, 0.5), 0.5, share > 0.5)))


def ensemble_mmem(y_true, conf, *, weights=None) -> dict[str, float]:
    """M-MEM of each ensemble: ``{"mv", "avg_c", "wed_c", "max_c", "min_c"}`` (wed_c needs weights)."""
    out = {"mv": majority_vote_mmem(y_true, conf)}
    for name, score in ensemble_scores(conf, weights=weights).items():
        out[name] = mmem(y_true, score)
    return {k: out[k] for k in ENSEMBLES if k in out}


@dataclass(frozen=True)
class TokenRemovalStep:
    """One prompt of a token-removal chain: the prompt, the word removed to get it, its dev M-MEM."""

    prompt: str
    removed: str | None
    score: float


def greedy_token_removal(prompt: str, score_fn: Callable[[Sequence[str]], np.ndarray], *,
                         maximize: bool, slot: str = "{name}") -> list[TokenRemovalStep]:
    """Iteratively remove one word from ``prompt`` until one word besides the slot remains.

    The importance of a word is ``score(prompt) - score(prompt without it)``. With
    ``maximize=True`` (the best prompt) the least important word goes, i.e. the
    removal with the highest score; with ``maximize=False`` (the worst prompt) the
    most important word goes, i.e. the removal with the lowest score. Ties go to
    the leftmost word, so the chain is deterministic. Words are whitespace words;
    the word holding the slot (with any punctuation attached) is never removed.

    Parameters
    ----------
    prompt : str
        A prompt with one slot.
    score_fn : callable
        ``score_fn(list of prompts) -> ndarray of M-MEM`` on the dev names; called
        once per step with every candidate of that step.
    maximize : bool

    Returns
    -------
    list of TokenRemovalStep
        The modified prompts in order (the original prompt is not included); empty
        when the prompt has at most one word besides the slot.

    Raises
    ------
    ValueError
        The prompt does not hold exactly one slot.
    """
    words = prompt.split()
    at = [i for i, w in enumerate(words) if slot in w]
    if len(at) != 1 or prompt.count(slot) != 1:
        raise ValueError(f"a prompt needs exactly one {slot} slot, found {prompt.count(slot)} in {prompt!r}")
    chain = []
    while len(words) > 2:
        removable = [i for i, w in enumerate(words) if slot not in w]
        candidates = [" ".join(words[:i] + words[i + 1:]) for i in removable]
        scores = np.asarray(score_fn(candidates), dtype=np.float64)
        pick = int(np.argmax(scores) if maximize else np.argmin(scores))  # first of equal scores
        removed = words[removable[pick]]
        words = words[:removable[pick]] + words[removable[pick] + 1:]
        chain.append(TokenRemovalStep(prompt=candidates[pick], removed=removed, score=float(scores[pick])))
    return chain


def kendall_tau(x, y) -> tuple[float, float]:
    """Kendall's tau-b between two prompt score vectors and its two-sided p-value (``scipy.stats.kendalltau``)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"kendall_tau needs two vectors of equal length, got {x.shape} and {y.shape}")
    res = kendalltau(x, y)
    return float(res.statistic), float(res.pvalue)


def tpr_at_dev_fpr(dev_true, dev_score, test_true, test_score, *, alpha: float) -> dict[str, float]:
    """TPR and FPR on test at the threshold that flags ``alpha`` of the dev out-of-sample names.

    The threshold is :func:`population_threshold` of the dev out-of-sample scores
    (member iff ``score > t``). With fewer than ``ceil(1 / alpha)`` dev out-of-sample
    names the rate cannot be resolved: every value is nan.

    Returns
    -------
    dict
        ``threshold``, ``tpr`` and ``fpr`` (achieved on test).
    """
    dev_true, test_true = check_labels(dev_true), check_labels(test_true)
    dev_out = np.asarray(dev_score, dtype=np.float64)[dev_true == 0]
    if dev_out.size < min_population_size(alpha):
        return {"threshold": math.nan, "tpr": math.nan, "fpr": math.nan}
    t = population_threshold(dev_out, alpha=alpha)
    m = metrics_at_threshold(test_true, test_score, threshold=t, alpha=alpha)
    return {"threshold": t, "tpr": m.tpr, "fpr": m.fpr}


def confidence_log_ratio(conf_target, conf_reference, *, floor: float = CONFIDENCE_FLOOR) -> np.ndarray:
    """Per prompt and name, ``log C(e; target) - log C(e; reference)`` (nats).

    Parameters
    ----------
    conf_target, conf_reference : array-like of shape (n_prompts, n_names) or (n_names,), float in [0, 1]
        Entity confidences ``C_k(e)`` (Xia et al. 2025, Eq. 1) of the same prompt x name
        sentences under the target tagger and under the reference tagger.
    floor : float
        Confidences below ``floor`` count as ``floor`` (a log of 0 would be -inf).

    Returns
    -------
    ndarray of the inputs' shape, float64
        Higher = the target is more confident than the reference: more likely in-sample.

    Raises
    ------
    ValueError
        Shapes differ, a confidence is not finite or lies outside [0, 1], or ``floor``
        is not in (0, 1).

    Notes
    -----
    The likelihood-ratio attack of Mireshghallah et al. (2022, Sect. 3) divides the
    target's likelihood of a sample by a reference model's, so that what is merely
    easy (likely under any model of the domain) cancels. Here the "likelihood" is the
    entity confidence of a name in a prompt, and the reference is a tagger trained on
    similar data without the audited names (in the WNUT demo: the tagger of the other
    half).

    >>> confidence_log_ratio([0.5, 0.2], [0.25, 0.2]).round(4).tolist()
    [0.6931, 0.0]
    """
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor!r}")
    t = np.asarray(conf_target, dtype=np.float64)
    r = np.asarray(conf_reference, dtype=np.float64)
    if t.shape != r.shape:
        raise ValueError(f"target and reference confidences must have one shape, got {t.shape} and {r.shape}")
    for what, x in (("target", t), ("reference", r)):
        if not np.isfinite(x).all() or (x < 0).any() or (x > 1).any():
            raise ValueError(f"{what} confidences must be finite and in [0, 1]")
    return np.log(np.maximum(t, floor)) - np.log(np.maximum(r, floor))


def ratio_scores(conf_target, conf_reference, *, floor: float = CONFIDENCE_FLOOR) -> np.ndarray:
    """Per-name ratio score: the mean over prompts of :func:`confidence_log_ratio`.

    Parameters
    ----------
    conf_target, conf_reference : array-like of shape (n_prompts, n_names)
    floor : float

    Returns
    -------
    ndarray of shape (n_names,), float64
        ``(1 / K) sum_k [log C_k(e; target) - log C_k(e; reference)]`` in nats; higher =
        more likely in-sample. Its AUC over in- and out-of-sample names is reported
        next to the target's own M-MEM.

    Raises
    ------
    ValueError
        As :func:`confidence_log_ratio`, or not a matrix.

    >>> ratio_scores([[0.5, 0.2], [0.5, 0.1]], [[0.25, 0.2], [0.5, 0.2]]).round(4).tolist()
    [0.3466, -0.3466]
    """
    ratios = confidence_log_ratio(conf_target, conf_reference, floor=floor)
    if ratios.ndim != 2:
        raise ValueError(f"ratio_scores needs (n_prompts, n_names) matrices, got shape {ratios.shape}")
    return ratios.mean(axis=0)
