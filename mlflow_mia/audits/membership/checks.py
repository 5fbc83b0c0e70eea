"""Checks of an audit's inputs, in one place, run before any model or attack does.

:func:`check_audit` (the models, then the data) runs once per audit, in
:func:`~mlflow_mia.audits.membership.run_audit` whatever the engine, before any model runs;
:func:`check_signals` checks signals against the data in stage 2, and :func:`check_shadow_signals`
the shadow record's IN/OUT direction on them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlflow_mia.attacks import MODEL_ROLES, reference_roles, required_inputs, required_roles
from mlflow_mia.attacks.shadow_record import check_shadow_direction
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet, invisible_variants, near_duplicates
from mlflow_mia.metrics.thresholds import min_population_size
from mlflow_mia.naming import fmt_alpha
from mlflow_mia.signals.identity import tokenizer_difference

__all__: list[str] = []


def check_audit(models, pool: AuditDataset, population: PopulationSet, config: AuditConfig) -> list[str]:
    """Every check of an audit's inputs, before any model runs: :func:`check_models`, then :func:`check_data`.

    Returns
    -------
    list of str
        Warnings of both, in that order.

    Raises
    ------
    ValueError
        What either raises.
    """
    return check_models(models, config) + check_data(pool, population, config)


def check_models(models, config: AuditConfig) -> list[str]:
    """Every model role the attacks need is there (:func:`~mlflow_mia.attacks.required_roles`), and the ratio means something.

    Parameters
    ----------
    models : AuditModels
    config : AuditConfig

    Returns
    -------
    list of str
        Warnings (a reference with another tokenizer, accepted by
        ``config.allow_tokenizer_mismatch``).

    Raises
    ------
    ValueError
        No target; an attack needs a model role that is missing (the message says
        which attacks, and how to give it, from :data:`~mlflow_mia.attacks.MODEL_ROLES`);
        a reference model's tokenizer (each of the reference set's) differs from the
        target's (the likelihood ratio would compare energies of different tokenisations) and
        ``config.allow_tokenizer_mismatch`` is off.
    """
    roles = required_roles(config.attacks)
    if models.target is None:
        raise ValueError("computing signals needs the target model: pass target=...")
    for role, attacks in roles.items():
        if role != "target" and getattr(models, role) is None:
            raise ValueError(f"attack(s) {list(attacks)} need {MODEL_ROLES[role]}")
    references = tuple(getattr(models, "references", ()) or ((models.reference,) if models.reference else ()))
    if "reference" not in roles:
        return []
    warnings = []
    for role, ref in zip(reference_roles(len(references)), references):
        which = "reference model" if len(references) == 1 else f"reference model {role!r}"
        if _weights_id(ref) is not None and _weights_id(ref) == _weights_id(models.target):
            raise ValueError(f"the {which} has the target's own weights ({_weights_id(ref)}): every likelihood ratio "
                             "would be 0 and the audit would show nothing. A reference must be trained on other "
                             "data than the target (the public base model, or a model fine-tuned on disjoint text)")
        differ = tokenizer_difference(models.target.tokenizer, ref.tokenizer)
        if differ and not config.allow_tokenizer_mismatch:
            raise ValueError(
                f"the {which}'s tokenizer differs from the target's ({differ}): the likelihood ratio would "
                "compare energies of different tokenisations. Use a reference trained with the target's tokenizer, "
                "or opt in with allow_tokenizer_mismatch=True (--allow-tokenizer-mismatch) and signal='pll'")
        if differ:
            warnings.append(f"the {which}'s tokenizer differs from the target's ({differ}); opted in with "
                            "allow_tokenizer_mismatch: the PLL ratio also reflects how the two tokenizers split the "
                            "texts")
    return warnings


def _weights_id(model) -> str | None:
    """The content digest of a loaded model's weights; None for a model given another way (a folder to load)."""
    return getattr(model, "weights_id", None) if getattr(model, "model", None) is not None else None


#: A reference whose pool signals differ from the target's by less than this (mean absolute difference
#: over the mean absolute target signal) is the target or a copy of it (a twin with 1e-4 weight noise
#: differs by about 1e-5; independently trained models by percents).
REFERENCE_MIN_DIFFERENCE = 1e-3


def check_references_differ(signals, n_pool: int) -> None:
    """Refuse a reference whose signals on the pool are (near) identical to the target's.

    Parameters
    ----------
    signals : AuditSignals
    n_pool : int
        Rows of the pool (the first rows of every signal).

    Raises
    ------
    ValueError
        For a reference (of a set: each) with ``mean|E_t - E_r| / mean|E_t| <`` :data:`REFERENCE_MIN_DIFFERENCE`
        over the pool's texts: a copy of the target (or the target plus noise) as reference makes every
        reference-based attack look like chance, so a gate would pass a leaking model.
    """
    target = np.asarray(signals.target.values[:n_pool], dtype=np.float64)
    refs = []
    if "reference" in signals:
        refs.append(("reference", signals["reference"]))
    if "references" in signals:
        refs += list(zip(signals["references"].roles, signals["references"].signals))
    scale = np.nanmean(np.abs(target)) if target.size else 0.0
    for role, ref in refs:
        values = np.asarray(ref.values[:n_pool], dtype=np.float64)
        diff = np.nanmean(np.abs(values - target)) / scale if scale > 0 else np.inf
        if diff < REFERENCE_MIN_DIFFERENCE:
            raise ValueError(f"the {role} model's signals on the pool equal the target's (mean relative difference "
                             f"{diff:.1e} < {REFERENCE_MIN_DIFFERENCE:g}): it is the target or a copy of it, and "
                             "every reference-based attack would look like chance. Use a reference trained on other "
                             "data than the target")


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
        only in invisible characters, combining marks, compatibility forms or whitespace,
        :func:`~mlflow_mia.data.canonical_text`: the model sees the same tokens).
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
        raise ValueError(f"{hidden} population text(s) equal a pool text up to invisible characters (format "
                         "characters such as zero-width spaces and joiners, soft hyphens, word joiners and byte-order "
                         "marks; default-ignorable code points such as variation selectors and the combining "
                         "grapheme joiner), combining marks (accents), compatibility forms (no-break spaces, "
                         "ligatures, full-width letters) or whitespace (mlflow_mia.data.canonical_text): the model "
                         "sees the same tokens, so they are the same record; the population must be disjoint from "
                         "the pool: drop them")
    variants = near_duplicates(pool.texts, population.texts)
    if variants:
        return [f"{variants} population text(s) equal a pool text up to case or whitespace; the population "
                "should be disjoint from the pool: drop them if they are the same record"]
    return []


def check_signals(signals, pool: AuditDataset, population: PopulationSet, attacks: Sequence[str]) -> None:
    """The signals hold what the attacks need, one row per pool text then one per population text.

    Parameters
    ----------
    signals : AuditSignals
    pool, population : the audit's data
    attacks : sequence of str
        The attacks to score (``AuditConfig.attacks``).

    Raises
    ------
    ValueError
        A signal an attack needs is missing; the row count is not
        ``n_pool + n_population``; the extras do not have one row per pool text; or
        ``signals.text_hashes`` (when given) do not match the pool's then the
        population's text hashes (the first differing row is named).
    """
    n_pool, n_rows = len(pool), len(pool) + len(population)
    needs = required_inputs(attacks)
    missing = {name: list(by) for name, by in needs.items() if name not in signals}
    if "target" not in signals:
        missing.setdefault("target", ["the sample table"])
    if missing:
        raise ValueError(f"signals are missing {sorted(missing)} (needed by {missing}); they hold "
                         f"{sorted(signals.signals)}")
    if len(signals) != n_rows:
        raise ValueError(f"signals have {len(signals)} rows; expected {n_rows} = {n_pool} pool rows followed by "
                         f"{len(population)} population rows, in that order")
    signals.extras.check(n_pool)
    check_references_differ(signals, n_pool)
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


def check_shadow_signals(signals, n_pool: int, population: PopulationSet) -> dict | None:
    """The shadow record IN/OUT direction check on the population rows of stage 1's signals.

    Parameters
    ----------
    signals : AuditSignals
        With ``shadow_membership`` (from the shadow record) and ``references`` (the shadows' signals).
    n_pool : int
        Rows of the pool (the population rows follow).
    population : PopulationSet
        Its groups, when given, are the check's units.

    Returns
    -------
    dict or None
        :meth:`~mlflow_mia.attacks.shadow_record.DirectionCheck.to_dict`; None without a shadow membership.

    Raises
    ------
    ValueError
        The IN shadows' statistic resolved below the OUT ones'
        (:func:`~mlflow_mia.attacks.shadow_record.check_shadow_direction`): a record with IN and OUT swapped.
    """
    if "shadow_membership" not in signals or "references" not in signals:
        return None
    values = np.asarray(signals["references"].values, dtype=np.float64)[:, n_pool:]
    member = np.asarray(signals["shadow_membership"], dtype=bool)[n_pool:]
    return check_shadow_direction(values, member, groups=population.groups).to_dict()
