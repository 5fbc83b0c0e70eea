"""Label-permutation nulls: of the spread of prompt M-MEMs, and of a membership AUC with labels per group.

**Is a membership AUC off 0.5 by more than chance?** (:func:`group_permutation_auc`).
When membership was decided per article, the member and non-member articles are one
draw of a random split; an AUC can sit off 0.5 because the two sets of articles differ
(e.g. a null target that saw no pool text still scores 0.46), not because a model
memorised them. The test shuffles the member / non-member labels *of whole articles*
(every sentence of an article keeps its article's label, so the dependence between
sentences of one article is kept), recomputes the AUC, and reports the two-sided
p-value ``(1 + #{|AUC_perm - 0.5| >= |AUC - 0.5|}) / (1 + rounds)``: how often a random
article split puts the AUC as far from 0.5 as observed.

**Is "prompt sensitivity" above chance?** (:func:`prompt_spread_null`).
Xia et al. (2025) call a model prompt-sensitive when its prompts' M-MEM (the AUC of
in-sample vs out-of-sample names under a prompt, :mod:`mlflow_mia.metrics.prompts`)
spread widely: the gap ``max - min`` and the standard deviation over prompts. With a few
dozen names per type, prompts spread by chance alone: each prompt's AUC is a noisy
estimate, and the maximum and minimum of many noisy estimates lie far apart even when
every prompt is equally good (and when none detects anything).

:func:`prompt_spread_null` gives that chance level. It shuffles the in/out labels
within the detection set (one permutation for all prompts, so the prompts keep their
correlation), recomputes every prompt's M-MEM, and takes the gap and standard deviation;
``rounds`` times. Under the null hypothesis that the labels carry no information for any
prompt, the observed gap is one draw from this distribution. Reported: the null's
``quantile`` (95th percentile) beside the observed value, and the permutation p-value
``(1 + #{null >= observed}) / (1 + rounds)`` (Phipson and Smyth 2010).

Vectorised: an AUC is ``(sum of the positives' ranks - n1 (n1 + 1) / 2) / (n1 n0)`` with
mid-ranks for ties (Mann-Whitney), and the ranks of the scores do not depend on the
labels. So the ranks are computed once, and all permutations' AUCs are one matrix
product ``labels (rounds, n) @ ranks``.

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language
   model-based named entity recognition", PLoS One 20(9), 2025 (gap and sigma of
   prompt performance, Sect. 5).
.. [2] B. Phipson and G. K. Smyth, "Permutation P-values Should Never Be Zero",
   Stat. Appl. Genet. Mol. Biol. 9(1), 2010.
.. [3] P. Good, "Permutation, Parametric and Bootstrap Tests of Hypotheses", 3rd ed.,
   Springer 2005, Sec. 3 (permuting the units that were randomised).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from .resampling import units_of_rows
from .validation import check_labels

__all__ = ["group_permutation_auc", "prompt_spread_null"]


@dataclass(frozen=True)
class PromptSpreadNull:
    """Observed spread of prompt M-MEMs and its label-permutation null.

    Attributes
    ----------
    gap, std : float
        Observed ``max - min`` and population standard deviation of the prompts' M-MEM.
    gap_null_quantile, std_null_quantile : float
        The null distribution's ``quantile`` (e.g. 95th percentile).
    gap_pvalue, std_pvalue : float
        ``(1 + #{null >= observed}) / (1 + rounds)``.
    rounds : int
    quantile : float
    """

    gap: float
    std: float
    gap_null_quantile: float
    std_null_quantile: float
    gap_pvalue: float
    std_pvalue: float
    rounds: int
    quantile: float


def permuted_prompt_mmem(y_true, conf, labels) -> np.ndarray:
    """Every prompt's M-MEM under each row of ``labels``, at once.

    Parameters
    ----------
    y_true : array-like of shape (n_names,), 0/1
        Only checked (labels and confidences must agree in length); the rows of ``labels`` are used.
    conf : array-like of shape (n_prompts, n_names), float
    labels : ndarray of shape (rounds, n_names), 0/1
        Label vectors, each with the class counts of ``y_true``.

    Returns
    -------
    ndarray of shape (rounds, n_prompts), float64
        Row ``r``, column ``k``: ``roc_auc_score(labels[r], conf[k])`` (ties count one half).

    Raises
    ------
    ValueError
        Shapes disagree, a confidence is not finite, or one class only.
    """
    y = check_labels(y_true)
    conf = np.asarray(conf, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if conf.ndim != 2 or conf.shape[1] != y.size:
        raise ValueError(f"conf must have shape (n_prompts, {y.size}), got {conf.shape}")
    if labels.ndim != 2 or labels.shape[1] != y.size:
        raise ValueError(f"labels must have shape (rounds, {y.size}), got {labels.shape}")
    if not np.isfinite(conf).all():
        raise ValueError("conf holds NaN or infinite confidences")
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        raise ValueError("M-MEM needs in-sample (1) and out-of-sample (0) names; got one class only")
    ranks = rankdata(conf, axis=1)  # mid-ranks: ties count one half
    return (labels @ ranks.T - n1 * (n1 + 1) / 2) / (n1 * n0)


def prompt_spread_null(y_true, conf, *, rounds: int = 1000, quantile: float = 0.95, seed: int = 0,
                       chunk: int = 250) -> PromptSpreadNull:
    """Gap and standard deviation of prompt M-MEMs against their label-permutation null.

    Parameters
    ----------
    y_true : array-like of shape (n_names,), 0/1
        1 = in-sample name (the detection set of one entity type and split).
    conf : array-like of shape (n_prompts, n_names), float
        ``C_k(e)`` of each prompt and name.
    rounds : int
        Permutations, >= 1.
    quantile : float
        Reported quantile of the null, in (0, 1).
    seed : int
        Seed of the permutations.
    chunk : int
        Permutations per matrix product (memory: ``chunk * n_names`` floats).

    Returns
    -------
    PromptSpreadNull

    Raises
    ------
    ValueError
        Bad shapes, one class only, fewer than 2 prompts, ``rounds < 1`` or ``quantile`` outside (0, 1).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = np.r_[np.ones(20), np.zeros(20)]
    >>> null = prompt_spread_null(y, rng.random((30, 40)), rounds=200)
    >>> null.gap_pvalue > 0.05  # random confidences: the spread is what chance gives
    True
    """
    y = check_labels(y_true)
    conf = np.asarray(conf, dtype=np.float64)
    if conf.ndim != 2 or conf.shape[0] < 2:
        raise ValueError(f"conf must have shape (n_prompts >= 2, n_names), got {conf.shape}")
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    observed = permuted_prompt_mmem(y, conf, y[None, :])[0]
    rng = np.random.default_rng(seed)
    gap_chunks, std_chunks = [], []
    for start in range(0, rounds, chunk):
        labels = rng.permuted(np.tile(y, (min(chunk, rounds - start), 1)), axis=1)
        scores = permuted_prompt_mmem(y, conf, labels)
        gap_chunks.append(scores.max(axis=1) - scores.min(axis=1))
        std_chunks.append(scores.std(axis=1))
    gaps, stds = np.concatenate(gap_chunks), np.concatenate(std_chunks)
    gap, std = float(observed.max() - observed.min()), float(observed.std())
    eps = 1e-12  # the observed statistic and a permutation equal to it up to rounding count as ">="
    return PromptSpreadNull(gap=gap, std=std, gap_null_quantile=float(np.quantile(gaps, quantile)),
                            std_null_quantile=float(np.quantile(stds, quantile)),
                            gap_pvalue=float((1 + np.sum(gaps >= gap - eps)) / (1 + rounds)),
                            std_pvalue=float((1 + np.sum(stds >= std - eps)) / (1 + rounds)),
                            rounds=rounds, quantile=quantile)


@dataclass(frozen=True)
class AucPermutation:
    """An AUC and its group-label permutation p-value (:func:`group_permutation_auc`).

    Attributes
    ----------
    auc : float
        Observed AUC (ties count one half).
    pvalue : float
        Two-sided: ``(1 + #{|AUC_perm - 0.5| >= |auc - 0.5|}) / (1 + rounds)``, in
        ``[1 / (1 + rounds), 1]``.
    rounds : int
    n_member_groups, n_non_member_groups : int
        The units whose labels were shuffled.
    """

    auc: float
    pvalue: float
    rounds: int
    n_member_groups: int
    n_non_member_groups: int


def group_permutation_auc(y_true, y_score, *, groups=None, rounds: int = 1000, seed: int = 0,
                          chunk: int = 250) -> AucPermutation:
    """AUC of ``y_score`` against ``y_true`` and its p-value under shuffled group labels.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,), 0/1
        1 = member; constant within each group.
    y_score : array-like of shape (n_samples,), float
        Attack scores, higher = member; finite.
    groups : array-like of shape (n_samples,), optional
        Group (article) of each sample: the labels of whole groups are shuffled, the
        number of member groups kept. None: each sample is its own group (a plain
        label permutation, e.g. for per-article scores).
    rounds : int
        Permutations, >= 1.
    seed : int
        Seed of the permutations.
    chunk : int
        Permutations per matrix product (memory: ``chunk * n_samples`` floats).

    Returns
    -------
    AucPermutation

    Raises
    ------
    ValueError
        Lengths differ, a score is not finite, one class only, a group holds both
        labels, or ``rounds < 1``.

    Notes
    -----
    Under the null hypothesis that the scores do not depend on which articles were
    members, every assignment of the member labels to the articles is equally likely,
    so the observed AUC is one draw from the permutation distribution (exact up to
    the Monte Carlo error of ``rounds`` draws). With groups of unequal size the number
    of member samples varies from one permutation to the next; each AUC uses its own.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(40), 5)
    >>> y = (groups < 20).astype(int)
    >>> group_permutation_auc(y, rng.normal(size=200), groups=groups, rounds=200).pvalue > 0.05
    True
    >>> group_permutation_auc(y, rng.normal(size=200) + y, groups=groups, rounds=200).pvalue
    0.004975124378109453
    """
    y = check_labels(y_true)
    score = np.asarray(y_score, dtype=np.float64)
    if score.shape != y.shape:
        raise ValueError(f"y_score must have shape {y.shape}, got {score.shape}")
    if not np.isfinite(score).all():
        raise ValueError("y_score holds NaN or infinite scores")
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    codes, group_label = units_of_rows(y, groups, why="the test shuffles the labels of whole groups")
    n_groups = group_label.size
    n1 = int(group_label.sum())
    if n1 == 0 or n1 == n_groups:
        raise ValueError("the AUC needs members (1) and non-members (0); got one class only")
    ranks = rankdata(score)  # mid-ranks: ties count one half

    def aucs(labels):  # labels: (r, n_samples) 0/1
        pos = labels.sum(axis=1)
        return (labels @ ranks - pos * (pos + 1) / 2) / (pos * (y.size - pos))

    observed = float(aucs(y[None, :].astype(np.float64))[0])
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, rounds, chunk):
        shuffled = rng.permuted(np.tile(group_label, (min(chunk, rounds - start), 1)), axis=1)
        null = aucs(shuffled[:, codes].astype(np.float64))
        extreme += int(np.sum(np.abs(null - 0.5) >= abs(observed - 0.5) - 1e-12))  # ties with observed count
    return AucPermutation(auc=observed, pvalue=(1 + extreme) / (1 + rounds), rounds=rounds, n_member_groups=n1,
                          n_non_member_groups=n_groups - n1)
