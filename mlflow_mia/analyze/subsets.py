"""What the suite reads from an audit beyond its own metrics: length subsets and article-label permutation tests."""

from __future__ import annotations

import numpy as np

from mlflow_mia.audits.membership.scoring import attack_report
from mlflow_mia.metrics.aggregate import group_scores
from mlflow_mia.metrics.permutation import group_permutation_auc

__all__: list[str] = []

PERMUTATION_ROUNDS = 1000  # article-label permutations behind each null AUC's p-value (resolution 1 / 1001)

def length_subsets(result, config) -> dict:
    """``len_short/...`` and ``len_long/...`` metrics: each attack on the pool's samples of that length bin."""
    samples = result.samples
    y, n_tokens = samples["label"].to_numpy(), samples["n_tokens"].to_numpy()
    out = {}
    for label, (lo, hi) in zip(("short", "long"), config.metrics.length_bins):
        keep = (n_tokens >= lo) & (n_tokens < hi)
        if len(set(y[keep])) < 2:
            continue
        # With groups, the intervals resample whole groups, as at the full pool's sample level.
        groups = samples["group"].to_numpy()[keep] if samples["group"].notna().all() else None
        for attack in result.attacks:
            report = attack_report(attack, y[keep], samples[f"score_{attack}"].to_numpy()[keep],
                                   result.population_scores.get(attack), config, groups=groups)
            out.update(report.metrics(f"len_{label}/{attack}/"))
        out[f"len_{label}/n_samples"] = float(keep.sum())
    return out


def permutation_metrics(result, config, subsets=(), *, rounds: int = PERMUTATION_ROUNDS, seed: int = 0) -> dict:
    """``<prefix><attack>/auc_permutation_p``: each AUC of an audit against shuffled article labels.

    Every sentence keeps its article's label (:func:`mlflow_mia.metrics.permutation.group_permutation_auc`);
    the prefixes are the audit's own: ``""`` (sentences), ``user/`` (per-article mean scores)
    and the length bins of ``subsets``. Only the p-values are returned: labels and scores
    stay in memory.

    Parameters
    ----------
    result : AuditResult
    config : AuditConfig
        Its ``metrics.length_bins`` define the length subsets.
    subsets : tuple of str
        The experiment's subsets (``"length"``).
    rounds, seed : int

    Returns
    -------
    dict of str to float
        Two-sided p-values in ``[1 / (1 + rounds), 1]``.
    """
    samples = result.samples
    y = samples["label"].to_numpy()
    groups = samples["group"].to_numpy() if samples["group"].notna().all() else None
    parts = {"": np.ones(len(y), dtype=bool)}
    if "length" in subsets:
        n_tokens = samples["n_tokens"].to_numpy()
        for label, (lo, hi) in zip(("short", "long"), config.metrics.length_bins):
            parts[f"len_{label}/"] = (n_tokens >= lo) & (n_tokens < hi)
    out = {}
    for attack in result.attacks:
        score = samples[f"score_{attack}"].to_numpy(dtype=float)
        for prefix, part in parts.items():
            keep = part & np.isfinite(score)
            if len(set(y[keep])) < 2:
                continue
            out[f"{prefix}{attack}/auc_permutation_p"] = group_permutation_auc(
                y[keep], score[keep], groups=None if groups is None else groups[keep], rounds=rounds,
                seed=seed).pvalue
        if groups is not None:
            keep = np.isfinite(score)
            users = group_scores(y[keep], score[keep], groups[keep])
            out[f"user/{attack}/auc_permutation_p"] = group_permutation_auc(users.y_true, users.y_score,
                                                                            rounds=rounds, seed=seed).pvalue
    return out
