"""The local engine's stage 1: everything that needs a model, from the models that give it.

:func:`stage_one` runs, over the pool texts followed by the
population texts, the stage-1 function of every input the attacks declare in
their ``requires`` (:data:`mlflow_mia.attacks.INPUTS`: target and reference
signals, neighbour values, ...), then what the report tables read beyond them
(token ids, neighbour examples, the generator-quality evidence), and returns it
all as :class:`AuditSignals`. Stage 2 (:func:`mlflow_mia.audits.membership.score_audit`)
turns signals into scores, metrics and tables and runs no model, so signals
computed anywhere (a cache, another process, a Spark cluster) can be scored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
import dataclasses

from mlflow_mia.attacks import INPUTS, required_inputs, required_roles, required_token_quantities
from mlflow_mia.attacks.inputs import StageOne, reference_roles
from mlflow_mia.engines.audit_signals import EXAMPLE_NEIGHBOURS, AuditExtras, AuditSignals
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import MaskedLM, SignalCache, tokenize
from mlflow_mia.signals.causal_model import LANGUAGE_MODELS, as_language_model
from mlflow_mia.signals.dispatch import check_model_kinds
from mlflow_mia.signals.neighbours import choose_generator
from mlflow_mia.signals.runtime import token_limit
from mlflow_mia.attacks import ATTACKS
from mlflow_mia.signals.dispatch import signal_config_for
from mlflow_mia.signals.generator_quality import measure_generator
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe

__all__ = ["AuditModels", "AuditSignals", "AuditExtras", "needed_inputs", "stage_one"]


@dataclass(frozen=True)
class AuditModels:
    """The models of one audit, by role.

    Attributes
    ----------
    target : MaskedLM or None
        The model under audit (None when scoring signals computed elsewhere).
    generator : MaskedLM, str or None
        The masked LM proposing neighbours (``neighbourhood``): a model, or a
        local folder loaded when neighbours are generated.
    references : tuple of MaskedLM
        Every reference model of the audit's reference set (roles
        :func:`~mlflow_mia.attacks.inputs.reference_roles`); ``(reference,)`` with one,
        empty with none. Any sequence given is stored as a tuple.
    reference : MaskedLM or None
        Read-only: the first of ``references`` (``likelihood_ratio``), None with none.
    shadow_membership : callable or None
        ``texts -> bool ndarray of shape (len(texts), k)``: which reference (shadow) model
        trained on each text, read from the shadows' training record
        (:func:`~mlflow_mia.attacks.shadow_record.shadow_membership`); stage 1 computes the
        ``shadow_membership`` input of ``lira_online`` with it. None: no record.
    """

    target: MaskedLM | None = None
    generator: object = None
    references: tuple = ()
    shadow_membership: object = None

    def __post_init__(self):
        object.__setattr__(self, "references", tuple(self.references))

    @property
    def reference(self):
        """The first reference model, or None when the audit has none."""
        return self.references[0] if self.references else None

    @classmethod
    def build(cls, target, *, references: Sequence | None = None, generator=None,
              config: AuditConfig | None = None, load=None, shadow_membership=None) -> "AuditModels":
        """Load each role the audit has and pick the neighbour generator.

        Parameters
        ----------
        target, generator : MaskedLM, (model, tokenizer) or str (a local folder), optional
            What the engine's ``load`` accepts (the Spark engine: model URIs and folders).
        config : AuditConfig, optional
            When one of its attacks needs the generator role
            (:func:`~mlflow_mia.attacks.required_roles`), the generator follows
            :func:`~mlflow_mia.signals.neighbours.choose_generator`: ``generator``, then
            ``config.neighbourhood.generator_model`` (a folder, loaded when first used),
            then the first of ``references``. Otherwise no generator.
        load : callable, optional
            ``load(model, role=...) -> MaskedLM or CausalLM``: the engine's loader (default
            :func:`~mlflow_mia.signals.causal_model.as_language_model`: either kind, read from the model).
        references : sequence, optional
            The reference models (each what ``load`` accepts), loaded with the roles
            ``reference``, ``reference_2``, ...; one is ``[reference]``.
        shadow_membership : callable, optional
            Kept as the attribute (which shadow trained on each text).

        Raises
        ------
        ValueError
            ``references`` not a list (one model: ``[model]``) or empty; models of
        different kinds (:func:`~mlflow_mia.signals.dispatch.check_model_kinds`).
        """
        config = config or AuditConfig()
        load = load or as_language_model
        refs = _reference_list(references)
        target = None if target is None else load(target, role="target")
        loaded = tuple(load(m, role=role) for m, role in zip(refs, reference_roles(len(refs))))
        reference = loaded[0] if loaded else None
        if "generator" in required_roles(config.attacks):
            generator = None if generator is None else load(generator, role="neighbour generator")
            generator = choose_generator(generator, configured=config.neighbourhood.generator_model,
                                         reference=reference)
        else:
            generator = None
        # models of different kinds (causal vs masked) fail here, before the tokenizer checks
        check_model_kinds(target, loaded, attacks=config.attacks, generator=generator)
        return cls(target=target, generator=generator, references=loaded, shadow_membership=shadow_membership)

    def config_for(self, config: AuditConfig) -> AuditConfig:
        """``config`` with the signal the target gets (:func:`~mlflow_mia.signals.dispatch.signal_config_for`).

        A causal target's audit records ``signal="causal"`` (its values are mean NLLs per
        predicted token), not the default ``"energy"`` it was asked with.
        """
        if self.target is None or not hasattr(self.target, "model"):
            return config
        signal = signal_config_for(self.target, config.signal)
        return config if signal == config.signal else dataclasses.replace(config, signal=signal)

    def identities(self) -> dict:
        """``{role: {"identity": model id, "name": ...}}`` of every model present (generator: folder or model).

        Reference models are ``reference``, ``reference_2``, ... (one key each).
        ``AuditResult.models`` and ``audit_config.json`` hold this record; ``AuditResult.info``
        derives ``target_model``, ``reference_model``, ``neighbour_generator`` from it.
        """
        out = {}
        roles = [("target", self.target)]
        roles += list(zip(reference_roles(len(self.references)), self.references))
        roles.append(("generator", self.generator))
        for role, lm in roles:
            if isinstance(lm, LANGUAGE_MODELS):
                out[role] = {"identity": lm.model_id, "name": lm.name, "weights": lm.weights_id}
            elif lm is not None:
                out[role] = {"identity": str(lm), "name": None}
        return out


def _reference_list(references) -> list:
    """The reference models as a list: ``list(references)``, or ``[]`` for None."""
    if references is None:
        return []
    if isinstance(references, (str, bytes)) or not hasattr(references, "__iter__"):
        raise ValueError(f"references must be a list of models, got {type(references).__name__}; pass one model "
                         "as references=[model]")
    refs = list(references)
    if not refs:
        raise ValueError("references is empty: give at least one reference model, or leave it out")
    return refs


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
                     neighbours=recipe, token_quantities=required_token_quantities(config.attacks))
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
    extras = _extras(stage, pool, population, needs)
    timings["extras_s"] = round(time.perf_counter() - start, 3)
    return AuditSignals(signals, text_hashes=list(pool.text_hashes) + list(population.text_hashes),
                        info={"models": models.identities(), "timings": timings}, extras=extras)


def _extras(stage: StageOne, pool: AuditDataset, population: PopulationSet, needs) -> AuditExtras:
    """Token ids of the pool under the target's tokenizer; with a generator, its evidence and the examples."""
    target, config = stage.models.target, stage.config
    ids, maskable, _ = tokenize(target, list(pool.texts),
                                max_length=token_limit(config.signal.max_length, target.max_length))
    token_ids = tuple(x[m] for x, m in zip(ids, maskable))
    examples = evidence = None
    recipe = stage.neighbours
    if recipe is not None:
        pool_texts = list(pool.texts)
        if "neighbour_values" in needs:  # the attack computed every neighbour's value: nothing runs again
            examples = tuple(tuple(zip(nb[:EXAMPLE_NEIGHBOURS], v[:EXAMPLE_NEIGHBOURS].tolist()))
                             for nb, v in zip(recipe.neighbours(pool_texts), recipe.values(pool_texts)))
        evidence = measure_generator(recipe, pool_texts, list(population.texts))
    return AuditExtras(token_ids=token_ids, vocab_size=len(target.tokenizer), neighbour_examples=examples,
                       generator=evidence)
