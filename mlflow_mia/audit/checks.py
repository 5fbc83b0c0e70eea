"""Checks of an audit's inputs, run before any model or attack does."""

from __future__ import annotations

import numpy as np

from mlflow_mia.attacks import required_inputs
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet, invisible_variants, near_duplicates
from mlflow_mia.metrics.thresholds import min_population_size
from mlflow_mia.naming import fmt_alpha

__all__ = ["check_data", "check_signals"]


def check_data(pool: AuditDataset, population: PopulationSet, config: AuditConfig) -> list[str]:
    """The pool has both classes; the population exists, is large enough and is disjoint from the pool.

    Returns
    -------
    list of str
        Warnings: population texts that equal a pool text up to case or whitespace.

    Raises
    ------
    ValueError
        A pool with one class, a missing or too small population set (it needs
        ``ceil(1 / min(fprs))`` samples), or a text in both (also when the two differ
        only in invisible characters or whitespace: the model sees the same tokens).
    """
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
    hidden = invisible_variants(pool.texts, population.texts)
    if hidden:
        raise ValueError(f"{hidden} population text(s) equal a pool text up to invisible characters (zero-width "
                         "space or joiner, soft hyphen, word joiner, byte-order mark, no-break space) or whitespace: "
                         "the model sees the same tokens, so they are the same record; the population must be "
                         "disjoint from the pool: drop them")
    variants = near_duplicates(pool.texts, population.texts)
    if variants:
        return [f"{variants} population text(s) equal a pool text up to case or whitespace; the population "
                "should be disjoint from the pool: drop them if they are the same record"]
    return []


def check_signals(signals, pool: AuditDataset, population: PopulationSet, config: AuditConfig) -> None:
    """The signals hold what the attacks need, one row per pool text then one per population text.

    Parameters
    ----------
    signals : AuditSignals
    pool, population : the audit's data
    config : AuditConfig

    Raises
    ------
    ValueError
        A signal an attack needs is missing; the row count is not
        ``n_pool + n_population``; or ``signals.text_hashes`` (when given) do not
        match the pool's then the population's text hashes (the first differing
        row is named).
    """
    n_pool, n_rows = len(pool), len(pool) + len(population)
    needs = required_inputs(config.attacks)
    missing = {name: list(attacks) for name, attacks in needs.items() if name not in signals}
    if "target" not in signals:
        missing.setdefault("target", ["the sample table"])
    if missing:
        raise ValueError(f"signals are missing {sorted(missing)} (needed by {missing}); they hold "
                         f"{sorted(signals.signals)}")
    if len(signals) != n_rows:
        raise ValueError(f"signals have {len(signals)} rows; expected {n_rows} = {n_pool} pool rows followed by "
                         f"{len(population)} population rows, in that order")
    if signals.text_hashes is None:
        return
    expected = np.asarray(list(pool.text_hashes) + list(population.text_hashes), dtype=object)
    given = np.asarray(signals.text_hashes, dtype=object)
    if given.shape != expected.shape:
        raise ValueError(f"signals carry {len(given)} text hashes for {n_rows} rows ({n_pool} pool + "
                         f"{len(population)} population)")
    wrong = np.flatnonzero(given != expected)
    if len(wrong):
        i = int(wrong[0])
        where = f"pool row {i}" if i < n_pool else f"population row {i - n_pool}"
        raise ValueError(f"signals are not aligned with the data: {len(wrong)} row(s) differ in text hash, first "
                         f"signal row {i} ({where}): signals must list the pool rows, then the population rows, "
                         "in their order")
