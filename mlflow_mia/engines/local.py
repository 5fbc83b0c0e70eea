"""The local engine's stage 1: everything that needs a model, from the models that give it.

:func:`stage_one` runs, over the pool texts followed by the
population texts, the stage-1 function of every input the attacks declare in
their ``requires`` (:data:`mlflow_mia.attacks.INPUTS`: target and reference
signals, neighbour values, ...), then what the report tables read beyond them
(token ids, neighbour examples, the generator-quality evidence), and returns it
all as :class:`AuditSignals`. Stage 2 (:func:`mlflow_mia.audits.membership.score_audit`)
turns signals into scores, metrics and tables and runs no model, so signals
computed anywhere (a cache, another process, a Spark cluster) can be scored.
:class:`LocalEngine` (the engine ``"local"`` of :mod:`mlflow_mia.engines.registry`) runs it
in this process; the Spark engine runs each model's signals on executors and the rest here.
"""

from __future__ import annotations

import time

from typing import ClassVar

from mlflow_mia.attacks import ATTACKS, INPUTS, required_inputs, required_roles, required_token_quantities
from mlflow_mia.attacks.inputs import StageOne
from mlflow_mia.engines.audit_signals import EXAMPLE_NEIGHBOURS, AuditExtras, AuditSignals
from mlflow_mia.engines.models import AuditModels
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalCache, tokenize
from mlflow_mia.signals.causal_model import as_language_model, language_models
from mlflow_mia.signals.dispatch import check_model_kinds
from mlflow_mia.signals.runtime import resolve_device, token_limit
from mlflow_mia.signals.generator_quality import measure_generator
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe

__all__ = ["LocalEngine", "AuditSignals", "AuditExtras", "needed_inputs", "stage_one"]


def needed_inputs(config: AuditConfig, n_references: int) -> dict[str, tuple[str, ...]]:
    """The inputs stage 1 computes: :func:`~mlflow_mia.attacks.required_inputs`, plus ``references`` when an
    attack reported against each reference (``Attack.per_reference``, e.g. ``likelihood_ratio``) runs with
    two or more reference models.

    >>> from mlflow_mia.config import AuditConfig
    >>> list(needed_inputs(AuditConfig(attacks=("loss", "likelihood_ratio")), 2))
    ['target', 'reference', 'references']
    >>> list(needed_inputs(AuditConfig(attacks=("loss", "likelihood_ratio")), 1))
    ['target', 'reference']
    """
    needs = dict(required_inputs(config.attacks))
    per_reference = tuple(a for a in config.attacks if getattr(ATTACKS[a], "per_reference", False))
    if per_reference and n_references > 1 and "references" not in needs:
        needs["references"] = per_reference
    return needs


def stage_one(models: AuditModels, pool: AuditDataset, population: PopulationSet, config: AuditConfig, *,
              cache: SignalCache | None = None, device=None, progress: bool = True,
              given: dict | None = None) -> AuditSignals:
    """Compute what the attacks of ``config`` need, and what the report tables read, on checked inputs.

    Parameters
    ----------
    models : AuditModels
        Checked (:func:`~mlflow_mia.audits.membership.checks.check_models`).
    pool, population : AuditDataset, PopulationSet
        Checked (:func:`~mlflow_mia.audits.membership.checks.check_data`); their texts are the rows.
    config : AuditConfig
    cache, device, progress
        As for :func:`compute_audit_signals`.
    given : dict of str to SignalResult or ndarray, optional
        Inputs an engine computed already (e.g. on Spark), by name: not recomputed.

    Returns
    -------
    AuditSignals
        ``target`` always (the sample table reads its token counts) and every input
        the attacks need, computed by its declaration's ``compute``; the extras: the
        target's token ids of the pool texts, and with the generator role the
        generator evidence and (with ``neighbour_values``) the neighbour examples.
        ``info``: the models' identities and the time of each input
        (``timings["signals_<input>_s"]``).
    """
    check_model_kinds(models.target, models.references, attacks=config.attacks, generator=models.generator)
    texts = list(pool.texts) + list(population.texts)
    needs = needed_inputs(config, len(models.references))
    given = dict(given or {})
    recipe = None
    if "generator" in required_roles(config.attacks):
        recipe = NeighbourRecipe.for_audit(models.generator, config, target=models.target, cache=cache,
                                           device=device, progress=progress)
    stage = StageOne(models=models, texts=texts, config=config, cache=cache, device=device, progress=progress,
                     neighbours=recipe, token_quantities=required_token_quantities(config.attacks),
                     n_pool=len(pool))
    timings, signals = {}, {}
    for name in INPUTS:
        if name in given:
            signals[name] = given[name]
        elif name == "target" or name in needs:
            start = time.perf_counter()
            signals[name] = INPUTS[name].compute(stage)
            timings[f"signals_{name}_s"] = round(time.perf_counter() - start, 3)
        if name in signals:
            stage.computed[name] = signals[name]
    start = time.perf_counter()
    extras = _extras(models.target, stage.neighbours, pool, population, max_length=config.signal.max_length,
                     neighbour_examples="neighbour_values" in needs)
    timings["extras_s"] = round(time.perf_counter() - start, 3)
    return AuditSignals(signals, text_hashes=list(pool.text_hashes) + list(population.text_hashes),
                        info={"models": models.identities(), "timings": timings}, extras=extras)


def _extras(target, recipe, pool: AuditDataset, population: PopulationSet, *, max_length,
            neighbour_examples: bool) -> AuditExtras:
    """Token ids of the pool under the target's tokenizer; with a generator (``recipe``), its evidence and, when
    the attack computed every neighbour's value (``neighbour_examples``), the examples."""
    ids, maskable, _ = tokenize(target, list(pool.texts), max_length=token_limit(max_length, target.max_length))
    token_ids = tuple(x[m] for x, m in zip(ids, maskable))
    examples = evidence = None
    if recipe is not None:
        pool_texts = list(pool.texts)
        if neighbour_examples:  # nothing runs again: the values are computed
            examples = tuple(tuple(zip(nb[:EXAMPLE_NEIGHBOURS], v[:EXAMPLE_NEIGHBOURS].tolist()))
                             for nb, v in zip(recipe.neighbours(pool_texts), recipe.values(pool_texts)))
        evidence = measure_generator(recipe, pool_texts, list(population.texts))
    return AuditExtras(token_ids=token_ids, vocab_size=len(target.tokenizer), neighbour_examples=examples,
                       generator=evidence)


class LocalEngine:
    """Stage 1 in this process: every declared input's ``compute``, on the models given.

    Attributes
    ----------
    options : tuple of str
        The engine's options in :func:`~mlflow_mia.engines.registry.get_engine` (none).
    """

    name = "local"
    options: ClassVar[tuple[str, ...]] = ()

    def check_device(self, device) -> None:
        """Raise for a device that does not exist here (:func:`~mlflow_mia.signals.runtime.resolve_device`)."""
        resolve_device(device)

    def check_inputs(self, needs) -> None:
        """Every declared input runs here: nothing to refuse."""

    def load(self, model, *, role: str) -> MaskedLM:
        """A MaskedLM or CausalLM, a ``(model, tokenizer)`` pair, a local folder, or a resolved model (its ``lm``)."""
        lm = getattr(model, "lm", None)  # a ResolvedModel of the integrations carries the loaded model
        return as_language_model(lm if isinstance(lm, language_models()) else model, role=role)

    def signals(self, models: AuditModels, pool, population, config, *, cache=None, device=None,
                progress: bool = True) -> AuditSignals:
        """:func:`stage_one` in this process."""
        signals = stage_one(models, pool, population, config, cache=cache, device=device, progress=progress)
        signals.info["engine"] = self.name
        return signals
