"""Stage-2 tables that read beyond the attack scores, from what stage 1 left in :class:`AuditExtras`.

No model runs here: the neighbours and their values, the target's token ids and
the generator's measured quality were computed in stage 1
(:func:`mlflow_mia.audits.membership.signals.stage_one`). Signals computed elsewhere may come
without them; each table is then skipped with a warning, and the metrics never
depend on them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mlflow_mia.audits.membership.signals import AuditExtras
from mlflow_mia.audits.membership.result import AttackReport
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset
from mlflow_mia.metrics.memorization_features import memorization_feature_analysis, sample_features, token_frequencies
from mlflow_mia.signals.generator_quality import judge_generator

__all__: list[str] = []


def neighbour_examples(extras: AuditExtras, pool: AuditDataset, samples, values, attack: str, *, warnings: list,
                       n_samples: int = 5):
    """The ``n_samples`` members ``attack`` scores highest, each followed by its first neighbours.

    Parameters
    ----------
    extras : AuditExtras
        Needs ``neighbour_examples``; without them the table is skipped and a warning says so.
    pool : AuditDataset
    samples : pandas.DataFrame
        The audit's sample table, with ``score_<attack>``.
    values : ndarray of shape (n_pool,)
        The pool's target values (energy in nats, or PLL).
    attack : str
        The attack whose scores pick the samples (``"neighbourhood"``).
    warnings : list of str
        Appended to when the table is skipped.

    Returns
    -------
    pandas.DataFrame or None
        ``sample_id``, ``text_hash``, ``kind`` (sample / neighbour), ``text``,
        ``energy`` (the target's value), ``score_<attack>``. Holds raw text.
    """
    if extras.neighbour_examples is None:
        warnings.append("neighbour examples skipped: the signals carry no neighbours (stage 1 computes them with "
                        "the target and generator models)")
        return None
    column = f"score_{attack}"
    scores = samples[column].to_numpy()
    members = np.flatnonzero((samples["label"].to_numpy() == 1) & ~np.isnan(scores))
    top = members[np.argsort(-scores[members], kind="stable")[:n_samples]]
    if not len(top):
        return None
    rows = []
    for i in top:
        base = {"sample_id": samples["sample_id"].iat[i], "text_hash": samples["text_hash"].iat[i]}
        rows.append({**base, "kind": "sample", "text": pool.texts[i], "energy": float(values[i]),
                     column: float(scores[i])})
        rows += [{**base, "kind": "neighbour", "text": text, "energy": float(value), column: float("nan")}
                 for text, value in extras.neighbour_examples[i]]
    return pd.DataFrame(rows)


def memorization_features(extras: AuditExtras, pool: AuditDataset, samples, report: AttackReport, name: str,
                          config: AuditConfig, warnings: list):
    """Features A-D of the members vs whether attack ``name`` flags them at the largest FPR.

    Mireshghallah et al. (2022), Sec. 4.6, Table 7. Reads the target's token ids
    of the pool texts from ``extras`` (token frequencies from the members): without
    them the analysis is skipped with a warning.

    Returns
    -------
    pandas.DataFrame or None
        :func:`mlflow_mia.metrics.memorization_features.memorization_feature_analysis`
        with ``attack`` and ``flagged_at_fpr`` columns; None when no population
        threshold exists, the token ids are absent, or too few members are (un)flagged.
    """
    if not report.population:
        return None
    if extras.token_ids is None:
        warnings.append("memorization-feature analysis skipped: it needs the target model's token ids, which the "
                        "signals do not carry (stage 1 computes them with the target's tokenizer)")
        return None
    widest = report.population[0]  # fprs are sorted descending
    members = np.flatnonzero(pool.labels == 1)
    scores = samples[f"score_{name}"].to_numpy()[members]
    keep = members[~np.isnan(scores)]
    flagged = samples[f"score_{name}"].to_numpy()[keep] > widest.threshold
    token_ids = [extras.token_ids[i] for i in keep]
    # Token frequencies from the members: the part of the training set the auditor holds.
    freq = token_frequencies(token_ids, vocab_size=max(extras.vocab_size or 0, int(max(map(np.max, token_ids))) + 1))
    try:
        table = memorization_feature_analysis(sample_features([pool.texts[i] for i in keep], token_ids, freq),
                                              flagged, seed=config.metrics.seed)
    except ValueError as err:
        warnings.append(f"memorization-feature analysis skipped: {err}")
        return None
    return table.assign(attack=name, flagged_at_fpr=widest.alpha)


def generator_check(extras: AuditExtras, pool: AuditDataset, values, *, warnings: list) -> dict[str, float]:
    """The neighbour generator's quality check as metrics (:func:`~mlflow_mia.signals.generator_quality.judge_generator`).

    ``values`` holds the pool's target values (nats). A failing check adds its
    warning to ``warnings`` (the report shows it): the neighbourhood attack's AUC
    is then no evidence of no leakage. Without the evidence (signals computed
    elsewhere) it is skipped with a warning.

    Returns
    -------
    dict of str to float
        ``neighbourhood/generator_accuracy``, ``neighbourhood/neighbour_shift_over_gap``, ...
    """
    if extras.generator is None:
        warnings.append("neighbour generator check skipped: the signals carry no generator evidence (stage 1 "
                        "measures it with the target and generator models)")
        return {}
    quality = judge_generator(extras.generator, values, pool.labels)
    if quality.warning():
        warnings.append(quality.warning())
    return quality.metrics()
