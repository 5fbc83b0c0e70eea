"""Stage 1 of the membership audit: the models' signals and what stage 2 reads -> :class:`AuditSignals`.

:func:`stage_one` runs, over the pool texts followed by the population texts, the
stage-1 function of every input the attacks declare in their ``requires``
(:data:`mlflow_mia.attacks.INPUTS`: target and reference signals, neighbour values, ...),
then what the report tables read beyond them (token ids, neighbour examples, the
generator-quality evidence), and returns it all as :class:`AuditSignals`. Each model's
signals are one per-model job of an engine (:mod:`mlflow_mia.engines`: this process, or
Spark executors); the rest runs here. Stage 2
(:func:`~mlflow_mia.audits.membership.score_audit`) reads only :class:`AuditSignals`, so
it runs no model: the attack inputs, and the few things the report tables read beyond
them (:class:`AuditExtras`), computed here with the models.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from mlflow_mia.attacks import ATTACKS, INPUTS, AttackInputs, required_inputs, required_roles, required_token_quantities
from mlflow_mia.attacks.inputs import ReferenceSignals, StageOne
from mlflow_mia.audits.membership.checks import check_audit
from mlflow_mia.audits.membership.models import AuditModels
from mlflow_mia.config import AuditConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signals import SignalCache, SignalResult, tokenize
from mlflow_mia.signals.dispatch import check_model_kinds
from mlflow_mia.signals.generator_quality import GeneratorEvidence, measure_generator
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe
from mlflow_mia.signals.runtime import token_limit

__all__ = ["AuditSignals", "AuditExtras", "compute_audit_signals"]

#: Neighbours kept per pool text for the neighbour-examples table.
EXAMPLE_NEIGHBOURS = 5


@dataclass(frozen=True)
class AuditExtras:
    """What the report tables read beyond the attack inputs; stage 1 computes it with the models.

    Every field is optional: signals computed elsewhere may come without them, and
    stage 2 then skips the table that needs one, with a warning. Rows are the pool's.

    Attributes
    ----------
    token_ids : tuple (n_pool) of ndarray (int64) or None
        The maskable token ids of each pool text under the target's tokenizer,
        truncated at the signal's token limit: features B and D of the
        memorization-feature analysis (Mireshghallah et al. 2022, Sec. 4.6).
    vocab_size : int or None
        ``len(tokenizer)`` of the target (the token-frequency table's size).
    neighbour_examples : tuple (n_pool) of tuple of (str, float) or None
        The first :data:`EXAMPLE_NEIGHBOURS` neighbours of each pool text with the
        target's value of each (nats, the signal's unit). Raw text.
    generator : GeneratorEvidence or None
        The neighbour generator's measured quality
        (:func:`mlflow_mia.signals.generator_quality.measure_generator`).
    """

    token_ids: tuple | None = None
    vocab_size: int | None = None
    neighbour_examples: tuple | None = None
    generator: GeneratorEvidence | None = None

    def check(self, n_pool: int) -> None:
        """Raise when a per-row field does not have one row per pool text.

        Raises
        ------
        ValueError
            ``token_ids`` or ``neighbour_examples`` of another length, or generator
            rows outside the pool.
        """
        for name in ("token_ids", "neighbour_examples"):
            value = getattr(self, name)
            if value is not None and len(value) != n_pool:
                raise ValueError(f"extras {name!r} have {len(value)} rows; expected one per pool text ({n_pool})")
        rows = getattr(self.generator, "rows", None)
        if rows is not None and len(rows) and (np.min(rows) < 0 or np.max(rows) >= n_pool):
            raise ValueError(f"the generator evidence names pool rows outside 0..{n_pool - 1}")


@dataclass(frozen=True)
class AuditSignals:
    """Signals of an audit's texts: the pool rows first, then the population rows.

    Build it from signals computed anywhere::

        AuditSignals({"target": SignalResult.from_arrays(energies, n_tokens=lengths),
                      "reference": SignalResult.from_arrays(ref_energies, n_tokens=lengths)},
                     text_hashes=list(pool.text_hashes) + list(population.text_hashes))

    Attributes
    ----------
    signals : dict of str to SignalResult or ndarray
        One entry per declared input (:data:`mlflow_mia.attacks.INPUTS`) the attacks
        need: a :class:`~mlflow_mia.signals.SignalResult` for a ``"signal"`` input
        (``"target"``, ``"reference"``), a :class:`~mlflow_mia.attacks.ReferenceSignals` for the
        ``"signals"`` input ``"references"``, an ndarray of shape (n_rows,), float64, NaN
        for a row without a value, for a ``"values"`` input (``"neighbour_values"``,
        ``"neighbour_local"``). Every entry has ``n_pool + n_population`` rows.
    text_hashes : tuple of str or None
        sha256 of each row's text (:func:`mlflow_mia.data.text_hash`); when given,
        :func:`~mlflow_mia.audits.membership.score_audit` checks them against the pool and population.
    info : dict
        ``models`` (:meth:`AuditModels.identities` of the models that computed the
        signals), ``timings`` and ``engine``; optional.
    extras : AuditExtras
        What the report tables read beyond the inputs (empty by default).

    Raises
    ------
    ValueError
        An unknown or former input name (the message names the new one), an entry of
        the wrong shape, or entries of different lengths.
    TypeError
        An entry of the wrong type.
    """

    signals: Mapping[str, SignalResult | ReferenceSignals | np.ndarray]
    text_hashes: tuple | None = None
    info: dict = field(default_factory=dict)
    extras: AuditExtras = field(default_factory=AuditExtras)

    def __post_init__(self):
        signals = dict(self.signals)
        unknown = sorted(set(signals) - set(INPUTS))
        if unknown:
            raise ValueError(f"unknown signal name(s) {unknown}; signals are named after attack inputs {list(INPUTS)}")
        signals = {name: INPUTS[name].checked(value) for name, value in signals.items()}
        lengths = {name: len(value) for name, value in signals.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"signals have different numbers of rows {lengths}: every entry must have one row "
                             "per pool text, then one per population text")
        object.__setattr__(self, "signals", signals)
        if self.text_hashes is not None:
            object.__setattr__(self, "text_hashes", tuple(self.text_hashes))
        if not isinstance(self.extras, AuditExtras):
            raise TypeError(f"extras must be an AuditExtras, got {type(self.extras).__name__}")

    def __contains__(self, name) -> bool:
        return name in self.signals

    def __getitem__(self, name):
        return self.signals[name]

    def __len__(self) -> int:
        return len(next(iter(self.signals.values()))) if self.signals else 0

    @property
    def target(self) -> SignalResult:
        """The target model's signals (KeyError when absent)."""
        target = self.signals["target"]
        if not isinstance(target, SignalResult):  # checked when built (INPUTS["target"].checked)
            raise TypeError(f"the target's signals must be a SignalResult, got {type(target).__name__}")
        return target

    def inputs(self, index, texts: Sequence[str], *, population=None) -> AttackInputs:
        """:class:`~mlflow_mia.attacks.AttackInputs` of rows ``index`` (int array); ``texts`` are those rows' texts.

        ``population``: the population set's AttackInputs (or ``"self"`` when these rows are
        the population set), for attacks that read it (:attr:`AttackInputs.population`).
        """
        index = np.asarray(index, dtype=np.int64)
        return AttackInputs(tuple(texts), population=population,
                            **{name: INPUTS[name].take(value, index) for name, value in self.signals.items()})


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


def check_engine_inputs(engine, needs: Mapping[str, Sequence[str]]) -> None:
    """Refuse, before any model loads, inputs an engine that runs only per-model jobs (``engine.remote``) cannot give.

    Such an engine (Spark) computes the signals of each model (inputs of ``rows="signal"`` or
    ``"signals"``, :data:`mlflow_mia.attacks.INPUTS`); the other inputs come from neighbours
    generated with the models on this machine.

    Parameters
    ----------
    engine : engine object
        Its ``remote`` (bool, default False) and ``name``.
    needs : mapping of str to sequence of str
        Input name -> the attacks needing it (:func:`~mlflow_mia.attacks.required_inputs`).

    Raises
    ------
    ValueError
        Such an input is needed on a remote engine; the message names its attacks and the way out.
    """
    if not getattr(engine, "remote", False):
        return
    local = {name: attacks for name, attacks in needs.items() if INPUTS[name].rows not in ("signal", "signals")}
    if local:
        attacks = list(dict.fromkeys(a for by in local.values() for a in by))
        raise ValueError(f"attack(s) {attacks} do not run on the {engine.name.capitalize()} engine yet: their "
                         f"input(s) {list(local)} come from neighbours generated on the driver; drop them from "
                         "attacks or use engine='local'")


def stage_one(models: AuditModels, pool: AuditDataset, population: PopulationSet, config: AuditConfig, *,
              cache: SignalCache | None = None, device=None, progress: bool = True,
              given: dict | None = None, engine=None) -> AuditSignals:
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
        Inputs computed already (e.g. the shadow membership), by name: not recomputed.
    engine : engine object, optional
        Runs each model's signals (``engine.model_signals``, :mod:`mlflow_mia.engines`); default:
        this process.

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
                     n_pool=len(pool), engine=engine)
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
    return AuditSignals(signals, text_hashes=(*pool.text_hashes, *population.text_hashes),
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


def engine_signals(engine, models: AuditModels, pool: AuditDataset, population: PopulationSet,
                   config: AuditConfig, *, cache: SignalCache | None = None, device=None,
                   progress: bool = True) -> AuditSignals:
    """:func:`stage_one` with each model's signals run by ``engine`` (:mod:`mlflow_mia.engines`).

    ``info["engine"]`` names the engine; on a remote engine (``engine.remote``, e.g. Spark)
    ``timings["signals_<engine>_s"]`` is the time of its per-model jobs (the sum of those inputs' times).
    """
    signals = stage_one(models, pool, population, config, cache=cache, device=device, progress=progress,
                        engine=engine)
    signals.info["engine"] = engine.name
    if getattr(engine, "remote", False):
        timings = signals.info["timings"]
        jobs = [timings.get(f"signals_{name}_s", 0.0) for name in signals.signals
                if INPUTS[name].rows in ("signal", "signals")]
        timings[f"signals_{engine.name}_s"] = round(sum(jobs), 3)
    return signals


def compute_audit_signals(models, pool: AuditDataset, population: PopulationSet, config: AuditConfig | None = None,
                          *, cache: SignalCache | str | None = None, device=None,
                          progress: bool = True) -> AuditSignals:
    """Stage 1 alone: check the inputs (:func:`~mlflow_mia.audits.membership.checks.check_audit`), then :func:`stage_one`.

    Parameters
    ----------
    models : AuditModels, MaskedLM, (model, tokenizer) or str
        The models by role; anything else is taken as the target alone.
    pool : AuditDataset
        Members (label 1) and non-members (label 0).
    population : PopulationSet
        Disjoint from the pool.
    config : AuditConfig, optional
        Attacks (what to compute), signal and neighbourhood settings.
    cache : SignalCache or str, optional
        Signal cache (or its directory): re-runs and shared references cost nothing.
    device : str, optional
        Default: CUDA when available, else CPU.
    progress : bool
        Show progress bars.

    Returns
    -------
    AuditSignals
        See :func:`stage_one`.

    Raises
    ------
    ValueError
        Before any model runs: unknown attacks, a missing reference or generator, and
        every data error of :func:`~mlflow_mia.audits.membership.checks.check_data`.
    """
    config = config or AuditConfig()
    required_inputs(config.attacks)  # unknown attacks fail first
    if not isinstance(models, AuditModels):
        models = AuditModels.build(models, config=config)
    check_audit(models, pool, population, config)
    if isinstance(cache, str):
        cache = SignalCache(cache)
    return stage_one(models, pool, population, config, cache=cache, device=device, progress=progress)
