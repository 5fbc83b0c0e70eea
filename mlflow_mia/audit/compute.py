"""Stage 1 of an audit: the signals the chosen attacks need, from the models that give them.

:func:`compute_audit_signals` runs every model the attacks declare in their
``requires`` (target energies, reference energies, neighbour energies) over
the pool texts followed by the population texts, and returns them as
:class:`AuditSignals`. Stage 2 (:func:`mlflow_mia.audit.score_audit`) turns
signals into scores and metrics and runs no model, so signals computed
anywhere (a cache, another process, a Spark cluster) can be scored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from mlflow_mia.attacks import INPUTS, NEIGHBOUR_INPUTS, AttackInputs, required_inputs
from mlflow_mia.config import AuditConfig
from mlflow_mia.signals import MaskedLM, SignalCache, SignalResult, compute_signals
from mlflow_mia.signals.model import as_masked_lm, tokenizer_difference
from mlflow_mia.signals.neighbours import HOW_TO_GIVE_A_GENERATOR, choose_generator

__all__ = ["AuditModels", "AuditSignals", "compute_audit_signals"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditModels:
    """The models of one audit, by role.

    Attributes
    ----------
    target : MaskedLM or None
        The model under audit (None when scoring signals computed elsewhere).
    reference : MaskedLM or None
        A model trained on similar but disjoint data (``likelihood_ratio``).
    generator : MaskedLM, str or None
        The masked LM proposing neighbours (``neighbourhood``): a model, or a
        local folder loaded when neighbours are generated.
    """

    target: MaskedLM | None = None
    reference: MaskedLM | None = None
    generator: object = None

    @classmethod
    def build(cls, target, *, reference=None, generator=None, config: AuditConfig | None = None) -> "AuditModels":
        """Load each role as a :class:`MaskedLM` and pick the neighbour generator.

        Parameters
        ----------
        target, reference, generator : MaskedLM, (model, tokenizer) or str (a local folder), optional
        config : AuditConfig, optional
            When one of its attacks needs neighbours, the generator follows
            :func:`~mlflow_mia.signals.neighbours.choose_generator`: ``generator``, then
            ``config.neighbourhood.generator_model``, then ``reference``. Otherwise no generator.
        """
        config = config or AuditConfig()
        target = None if target is None else as_masked_lm(target, role="target")
        reference = None if reference is None else as_masked_lm(reference, role="reference")
        generator = None if generator is None else as_masked_lm(generator, role="neighbour generator")
        if set(NEIGHBOUR_INPUTS) & set(required_inputs(config.attacks)):
            generator = choose_generator(generator, configured=config.neighbourhood.generator_model,
                                         reference=reference)
        else:
            generator = None
        return cls(target=target, reference=reference, generator=generator)

    def check(self, config: AuditConfig) -> list[str]:
        """Raise before any model runs when an attack lacks the model it needs, or the ratio would be meaningless.

        Returns
        -------
        list of str
            Warnings (a reference with another tokenizer, accepted by
            ``config.allow_tokenizer_mismatch``).

        Raises
        ------
        ValueError
            No target; an attack needs a reference or a neighbour generator that is
            missing; the reference's tokenizer differs from the target's (the
            likelihood ratio would compare energies of different tokenisations) and
            ``config.allow_tokenizer_mismatch`` is off.
        """
        needs = required_inputs(config.attacks)
        if self.target is None:
            raise ValueError("computing signals needs the target model: pass target=...")
        if "reference" in needs and self.reference is None:
            raise ValueError(
                f"attack(s) {list(needs['reference'])} need a reference model trained on similar but disjoint "
                "data; pass reference=... (or drop them, e.g. attacks=['loss'])")
        wanting = [a for name in NEIGHBOUR_INPUTS for a in needs.get(name, ())]
        if wanting and self.generator is None:
            raise ValueError(f"attack(s) {wanting} need a generator masked LM to propose neighbours; "
                             f"{HOW_TO_GIVE_A_GENERATOR}")
        differ = (tokenizer_difference(self.target.tokenizer, self.reference.tokenizer)
                  if "reference" in needs else None)
        if differ and not config.allow_tokenizer_mismatch:
            raise ValueError(
                f"the reference model's tokenizer differs from the target's ({differ}): the likelihood ratio would "
                "compare energies of different tokenisations. Use a reference trained with the target's tokenizer, "
                "or opt in with allow_tokenizer_mismatch=True (--allow-tokenizer-mismatch) and signal='pll'")
        return ([f"the reference model's tokenizer differs from the target's ({differ}); opted in with "
                 "allow_tokenizer_mismatch: the PLL ratio also reflects how the two tokenizers split the texts"]
                if differ else [])

    def identities(self) -> dict:
        """``{role: {"identity": model id, "name": ...}}`` of every model present (generator: folder or model).

        ``AuditResult.models`` and ``audit_config.json`` hold this record; ``AuditResult.info``
        derives ``target_model``, ``reference_model``, ``neighbour_generator`` from it.
        """
        out = {}
        for role in ("target", "reference", "generator"):
            lm = getattr(self, role)
            if isinstance(lm, MaskedLM):
                out[role] = {"identity": lm.model_id, "name": lm.name}
            elif lm is not None:
                out[role] = {"identity": str(lm), "name": None}
        return out


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
        One entry per input the attacks declare in ``requires`` (see
        :data:`mlflow_mia.attacks.INPUTS`): ``"target"`` and ``"reference"`` are
        :class:`~mlflow_mia.signals.SignalResult`; ``"neighbour_energy"`` is an
        ndarray of shape (n_rows,), float64, NaN for a text without neighbours.
        Every entry has ``n_pool + n_population`` rows.
    text_hashes : tuple of str or None
        sha256 of each row's text (:func:`mlflow_mia.data.text_hash`); when given,
        :func:`~mlflow_mia.audit.score_audit` checks them against the pool and population.
    info : dict
        ``models`` (:meth:`AuditModels.identities` of the models that computed the
        signals) and ``timings``; optional.

    Raises
    ------
    ValueError
        An unknown input name, an entry of the wrong type or shape, or entries of different lengths.
    """

    signals: Mapping[str, object]
    text_hashes: tuple | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        signals = dict(self.signals)
        unknown = sorted(set(signals) - set(INPUTS))
        if unknown:
            raise ValueError(f"unknown signal name(s) {unknown}; signals are named after attack inputs {list(INPUTS)}")
        for name, value in signals.items():
            if name in NEIGHBOUR_INPUTS:
                value = np.asarray(value, dtype=np.float64)
                if value.ndim != 1:
                    raise ValueError(f"signals {name!r} must be 1-D of shape (n_rows,), got shape {value.shape}")
                signals[name] = value
            elif not isinstance(value, SignalResult):
                raise TypeError(f"signals {name!r} must be a SignalResult (SignalResult.from_arrays(values, "
                                f"n_tokens=...)), got {type(value).__name__}")
        lengths = {name: len(value) for name, value in signals.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"signals have different numbers of rows {lengths}: every entry must have one row "
                             "per pool text, then one per population text")
        object.__setattr__(self, "signals", signals)
        if self.text_hashes is not None:
            object.__setattr__(self, "text_hashes", tuple(self.text_hashes))

    def __contains__(self, name) -> bool:
        return name in self.signals

    def __getitem__(self, name):
        return self.signals[name]

    def __len__(self) -> int:
        return len(next(iter(self.signals.values()))) if self.signals else 0

    @property
    def target(self) -> SignalResult:
        """The target model's signals (KeyError when absent)."""
        return self.signals["target"]

    def inputs(self, index, texts: Sequence[str]) -> AttackInputs:
        """:class:`~mlflow_mia.attacks.AttackInputs` of rows ``index`` (int array); ``texts`` are those rows' texts."""
        index = np.asarray(index, dtype=np.int64)
        taken = {name: (value[index] if name in NEIGHBOUR_INPUTS else value.take(index))
                 for name, value in self.signals.items()}
        return AttackInputs(texts=tuple(texts), **taken)


def compute_audit_signals(models, texts: Sequence[str], config: AuditConfig | None = None, *,
                          cache: SignalCache | str | None = None, device=None, progress: bool = True,
                          text_hashes: Sequence[str] | None = None) -> AuditSignals:
    """Compute exactly the signals the attacks of ``config`` declare in ``requires``.

    Parameters
    ----------
    models : AuditModels, MaskedLM, (model, tokenizer) or str
        The models by role; anything else is taken as the target alone.
    texts : sequence of str, length n_rows
        The pool texts followed by the population texts.
    config : AuditConfig, optional
        Attacks (what to compute), signal and neighbourhood settings.
    cache : SignalCache or str, optional
        Signal cache (or its directory): re-runs and shared references cost nothing.
    device : str, optional
        Default: CUDA when available, else CPU.
    progress : bool
        Show progress bars.
    text_hashes : sequence of str, optional
        Carried into the result for :func:`~mlflow_mia.audit.score_audit` to check.

    Returns
    -------
    AuditSignals
        ``target`` always (the sample table reads its token counts); ``reference``
        when an attack needs it; ``neighbour_energy`` (mean target energy of each
        text's neighbours, Mattern et al. 2023, Eq. 3) when an attack needs it.

    Raises
    ------
    ValueError
        Before any model runs: unknown attacks, a missing reference or generator.
    """
    config = config or AuditConfig()
    if not isinstance(models, AuditModels):
        models = AuditModels.build(models, config=config)
    needs = required_inputs(config.attacks)
    models.check(config)
    if isinstance(cache, str):
        cache = SignalCache(cache)
    texts = list(texts)
    timings, signals = {}, {}
    for role in ("target", "reference"):
        if role == "target" or role in needs:
            start = time.perf_counter()
            signals[role] = compute_signals(getattr(models, role), texts, config.signal, cache=cache, device=device,
                                            progress=progress, desc=f"{config.signal.kind} of {role}")
            timings[f"signals_{role}_s"] = round(time.perf_counter() - start, 3)
    if "neighbour_energy" in needs:
        from mlflow_mia.signals import neighbours

        start = time.perf_counter()
        signals["neighbour_energy"] = neighbours.neighbour_energies(
            models.target, texts, generator=models.generator, neighbourhood=config.neighbourhood,
            signal=config.signal, cache=cache, device=device, progress=progress)
        timings["neighbours_s"] = round(time.perf_counter() - start, 3)
    if "neighbour_local" in needs:
        from mlflow_mia.signals.neighbour_local import audit_local_scores

        start = time.perf_counter()
        signals["neighbour_local"] = audit_local_scores(models.target, texts, models.generator, config, cache=cache,
                                                        device=device)
        timings["neighbour_local_s"] = round(time.perf_counter() - start, 3)
    return AuditSignals(signals, text_hashes=text_hashes, info={"models": models.identities(), "timings": timings})
