"""Tables of an audit that read beyond the signal values: they need the models.

Both degrade gracefully: without the models they are skipped with a warning,
and the metrics never depend on them.
"""

from __future__ import annotations

import numpy as np

from mlflow_mia.audit.result import AttackReport
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset
from mlflow_mia.signals import compute_signals
from mlflow_mia.signals.runtime import token_limit

__all__ = ["neighbour_examples", "memorization_features", "generator_check"]


def neighbour_examples(models, pool: AuditDataset, samples, energy, config: AuditConfig, *, warnings: list,
                       cache=None, device=None, n_samples: int = 5, n_neighbours: int = 5):
    """The ``n_samples`` members the neighbourhood attack scores highest, with their first neighbours.

    Parameters
    ----------
    models : AuditModels or None
        Needs ``target`` and ``generator``; without them the table is skipped and
        a warning says so.
    energy : ndarray of shape (n_pool,)
        The pool's target energies.

    Returns
    -------
    pandas.DataFrame or None
        ``sample_id``, ``text_hash``, ``kind`` (sample / neighbour), ``text``,
        ``energy`` (nats under the target), ``score_neighbourhood``. Neighbours and
        their energies come from the cache the attack just filled (recomputed for
        these few texts without a cache). Holds raw text.
    """
    import pandas as pd

    from mlflow_mia.signals.neighbours import generate_neighbours

    if models is None or models.target is None or models.generator is None:
        warnings.append("neighbour examples skipped: the target and generator models are needed to show neighbours")
        return None
    scores = samples["score_neighbourhood"].to_numpy()
    members = np.flatnonzero((samples["label"].to_numpy() == 1) & ~np.isnan(scores))
    top = members[np.argsort(-scores[members], kind="stable")[:n_samples]]
    if not len(top):
        return None
    sc = config.signal
    texts = [pool.texts[i] for i in top]
    neighbours = generate_neighbours(models.generator, texts, config=config.neighbourhood, seed=sc.seed,
                                     device=device, progress=False, cache=cache, max_length=sc.max_length,
                                     token_budget=sc.token_budget)
    shown = [nb[:n_neighbours] for nb in neighbours]
    flat = [x for nb in shown for x in nb]
    keys = ([samples["text_hash"].iat[i] for i, nb in zip(top, shown) for _ in nb]
            if config.neighbourhood.shared_masks else None)
    theirs = iter(compute_signals(models.target, flat, sc, cache=cache, device=device, progress=False,
                                  mask_keys=keys).values)
    rows = []
    for i, text, e, nb in zip(top, texts, energy[top], shown):
        base = {"sample_id": samples["sample_id"].iat[i], "text_hash": samples["text_hash"].iat[i]}
        rows.append({**base, "kind": "sample", "text": text, "energy": float(e),
                     "score_neighbourhood": float(scores[i])})
        rows += [{**base, "kind": "neighbour", "text": x, "energy": float(next(theirs)),
                  "score_neighbourhood": float("nan")} for x in nb]
    return pd.DataFrame(rows)


def memorization_features(models, pool: AuditDataset, samples, report: AttackReport, name: str,
                          config: AuditConfig, warnings: list):
    """Features A-D of the members vs whether attack ``name`` flags them at the largest FPR.

    Mireshghallah et al. (2022), Sec. 4.6, Table 7. Needs the target model's
    tokenizer (token ids and frequencies): without ``models.target`` the analysis
    is skipped with a warning.

    Returns
    -------
    pandas.DataFrame or None
        :func:`mlflow_mia.metrics.memorization_features.memorization_feature_analysis`
        with ``attack`` and ``flagged_at_fpr`` columns; None when no population
        threshold exists, the target is absent, or too few members are (un)flagged.
    """
    from mlflow_mia.metrics.memorization_features import (memorization_feature_analysis, sample_features,
                                                          token_frequencies)
    from mlflow_mia.signals.energy import tokenize

    if not report.population:
        return None
    if models is None or models.target is None:
        warnings.append("memorization-feature analysis skipped: it needs the target model's tokenizer")
        return None
    target = models.target
    widest = report.population[0]  # fprs are sorted descending
    members = np.flatnonzero(pool.labels == 1)
    scores = samples[f"score_{name}"].to_numpy()[members]
    keep = members[~np.isnan(scores)]
    flagged = samples[f"score_{name}"].to_numpy()[keep] > widest.threshold
    ids, maskable, _ = tokenize(target, [pool.texts[i] for i in keep],
                                max_length=token_limit(config.signal.max_length, target.max_length))
    token_ids = [x[m] for x, m in zip(ids, maskable)]
    # Token frequencies from the members: the part of the training set the auditor holds.
    freq = token_frequencies(token_ids, vocab_size=max(len(target.tokenizer), int(max(map(np.max, token_ids))) + 1))
    try:
        table = memorization_feature_analysis(sample_features([pool.texts[i] for i in keep], token_ids, freq),
                                              flagged, seed=config.metrics.seed)
    except ValueError as err:
        warnings.append(f"memorization-feature analysis skipped: {err}")
        return None
    return table.assign(attack=name, flagged_at_fpr=widest.alpha)


def generator_check(models, pool: AuditDataset, population, energy, config: AuditConfig, *, warnings: list,
                    cache=None, device=None) -> dict[str, float]:
    """The neighbour generator's quality check (:mod:`mlflow_mia.signals.generator_quality`) as metrics.

    Run when a neighbour attack ran; ``energy`` holds the pool's target values (nats).
    A failing check adds its warning to ``warnings`` (the report shows it): the
    neighbourhood attack's AUC is then no evidence of no leakage. Without the
    models (signals computed elsewhere) it is skipped with a warning.

    Returns
    -------
    dict of str to float
        ``neighbourhood/generator_accuracy``, ``neighbourhood/neighbour_shift_over_gap``, ...
    """
    from mlflow_mia.signals.generator_quality import check_generator

    if models is None or models.target is None or models.generator is None:
        warnings.append("neighbour generator check skipped: the models are not available (scoring signals "
                        "computed elsewhere)")
        return {}
    quality = check_generator(models.target, models.generator, list(pool.texts), pool.labels, energy,
                              list(population.texts), config=config, cache=cache, device=device)
    if quality.warning():
        warnings.append(quality.warning())
    return quality.metrics()
