"""What stage 1 hands to stage 2: :class:`AuditSignals` (the attack inputs) and :class:`AuditExtras`.

Everything stage 2 (:func:`~mlflow_mia.audits.membership.score_audit`) reads is here, so it runs
no model: the attack inputs declared in :data:`mlflow_mia.attacks.INPUTS`, and the
few things the report tables read beyond them (token ids, neighbour examples, the
generator-quality evidence), computed in stage 1 with the models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from mlflow_mia.attacks import INPUTS, AttackInputs
from mlflow_mia.signals import SignalResult

__all__ = ["AuditSignals", "AuditExtras", "EXAMPLE_NEIGHBOURS"]

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
    generator: object = None

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

    signals: Mapping[str, object]
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
        return self.signals["target"]

    def inputs(self, index, texts: Sequence[str], *, population=None) -> AttackInputs:
        """:class:`~mlflow_mia.attacks.AttackInputs` of rows ``index`` (int array); ``texts`` are those rows' texts.

        ``population``: the population set's AttackInputs (or ``"self"`` when these rows are
        the population set), for attacks that read it (:attr:`AttackInputs.population`).
        """
        index = np.asarray(index, dtype=np.int64)
        return AttackInputs(tuple(texts), population=population,
                            **{name: INPUTS[name].take(value, index) for name, value in self.signals.items()})
