"""The neighbour recipe, written once: generator + settings -> neighbours -> their values under the target.

Every consumer of neighbours (the ``neighbourhood`` and ``neighbourhood_local``
attack inputs, the generator-quality check, the examples table) goes through one
:class:`NeighbourRecipe` per audit. It calls
:func:`~mlflow_mia.signals.neighbours.generate_neighbours` with the audit's
settings (``NeighbourhoodConfig``; the signal's seed, ``max_length`` and
``token_budget``) and :func:`~mlflow_mia.signals.energy.compute_signals` for the
target's value of each neighbour (masks drawn from the sample's key with
``shared_masks``), and it remembers both: a second consumer of the same texts
reuses them, with or without a signal cache, and so reads the very numbers the
attack read.

References
----------
Mattern et al. (2023), "Membership Inference Attacks against Language Models via
Neighbourhood Comparison", Findings of ACL, Sec. 2.2 (neighbours) and Eq. 3 (the
neighbour mean, the difficulty term ``d(x)``).
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from mlflow_mia.config import NeighbourhoodConfig, SignalConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.dispatch import compute_signals
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.neighbours import HOW_TO_GIVE_A_GENERATOR, choose_generator, generate_neighbours, load_generator

__all__ = ["NeighbourRecipe"]

log = logging.getLogger(__name__)


class NeighbourRecipe:
    """Neighbours of texts and the target's values of them, computed once per text.

    Parameters
    ----------
    generator : MaskedLM, (model, tokenizer), str or None
        The masked LM proposing neighbours; None uses ``neighbourhood.generator_model``
        (:func:`~mlflow_mia.signals.neighbours.choose_generator`). A folder is loaded
        on first use, once.
    neighbourhood : NeighbourhoodConfig, optional
        ``num_neighbours``, ``num_replacements``, ``dropout``, ``shared_masks``.
    signal : SignalConfig, optional
        Kind (energy, PLL or causal), seed (of the dropout and the masks), ``max_length``,
        ``token_budget`` and ``dtype``, for the generator and the target alike.
    target : MaskedLM, optional
        The model under audit; needed by :meth:`values` only.
    cache : SignalCache, optional
        Neighbours are cached beside it as edits, their values in it.
    device : str, optional
    progress : bool

    Raises
    ------
    ValueError
        No generator is given and ``neighbourhood.generator_model`` is None.

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_bert
    >>> recipe = NeighbourRecipe(tiny_bert(seed=0), neighbourhood=NeighbourhoodConfig(num_neighbours=3),
    ...                          target=MaskedLM(*tiny_bert(seed=1)), progress=False)
    >>> [len(nb) for nb in recipe.neighbours(["the cat sat on the mat .", "1 2"])]
    [3, 0]
    >>> values = recipe.mean_values(["the cat sat on the mat .", "1 2"])
    >>> bool(np.isfinite(values[0])), bool(np.isnan(values[1]))
    (True, True)
    """

    def __init__(self, generator=None, *, neighbourhood: NeighbourhoodConfig | None = None,
                 signal: SignalConfig | None = None, target: MaskedLM | None = None,
                 cache: SignalCache | None = None, device=None, progress: bool = True):
        self.neighbourhood = neighbourhood or NeighbourhoodConfig()
        self.signal = signal or SignalConfig()
        generator = choose_generator(generator, configured=self.neighbourhood.generator_model)
        if generator is None:
            raise ValueError("the neighbourhood attack needs a generator masked LM to propose neighbours: "
                             + HOW_TO_GIVE_A_GENERATOR)
        self.generator, self.target = generator, target
        self.cache, self.device, self.progress = cache, device, progress
        self._lm: MaskedLM | None = None
        self._neighbours: dict[str, list[str]] = {}
        self._values: dict[tuple[str, str], float] = {}

    @classmethod
    def for_audit(cls, generator, config, *, target=None, cache=None, device=None,
                  progress: bool = True) -> "NeighbourRecipe":
        """The recipe of an audit: ``config.neighbourhood`` and ``config.signal`` of an :class:`AuditConfig`."""
        return cls(generator, neighbourhood=config.neighbourhood, signal=config.signal, target=target, cache=cache,
                   device=device, progress=progress)

    @property
    def lm(self) -> MaskedLM:
        """The generator as a :class:`MaskedLM`, loaded on first use (:func:`load_generator` checks its head)."""
        if self._lm is None:
            self._lm = load_generator(self.generator)
        return self._lm

    def neighbours(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's neighbours (:func:`~mlflow_mia.signals.neighbours.generate_neighbours`), generated once.

        Returns
        -------
        list (n_texts) of list of str
            Empty for a text without a replaceable word.
        """
        texts = list(texts)
        todo = [t for t in dict.fromkeys(texts) if t not in self._neighbours]
        if todo:
            sc = self.signal
            found = generate_neighbours(self.lm, todo, config=self.neighbourhood, seed=sc.seed, device=self.device,
                                        progress=self.progress, cache=self.cache, max_length=sc.max_length,
                                        token_budget=sc.token_budget, dtype=sc.dtype)
            self._neighbours.update(zip(todo, found))
        return [list(self._neighbours[t]) for t in texts]

    def values(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The target's signal value of each neighbour of each text, in :meth:`neighbours` order.

        With ``shared_masks`` (energy signal) a neighbour's K masks come from its
        sample's key, so the neighbour and its sample are masked alike.

        Returns
        -------
        list (n_texts) of ndarray of shape (n_neighbours_i,), float64
            Nats (``kind="energy"``) or nats/token (``kind="pll"``).

        Raises
        ------
        ValueError
            The recipe has no target.
        """
        if self.target is None:
            raise ValueError("neighbour values need the target model: NeighbourRecipe(..., target=...)")
        texts = list(texts)
        neighbours = self.neighbours(texts)
        shared = self.neighbourhood.shared_masks
        keys = [text_hash(t) if shared else "" for t in texts]
        todo = list(dict.fromkeys((x, k) for k, nb in zip(keys, neighbours) for x in nb
                                  if (x, k) not in self._values))
        if todo:
            sc = self.signal
            res = compute_signals(self.target, [x for x, _ in todo], sc, cache=self.cache, device=self.device,
                                  progress=self.progress, desc=f"{sc.kind} of neighbours",
                                  mask_keys=[k for _, k in todo] if shared else None,
                                  stats=False)  # only the values are read
            self._values.update(zip(todo, res.values.tolist()))
        return [np.array([self._values[(x, k)] for x in nb], dtype=np.float64) for k, nb in zip(keys, neighbours)]

    def mean_values(self, texts: Sequence[str]) -> np.ndarray:
        """``mean_j V(x_j; theta)`` per text (Mattern et al. 2023, Eq. 3), shape (n_texts,), float64.

        NaN for a text without neighbours (the count is logged).
        """
        texts = list(texts)
        out = np.full(len(texts), np.nan, dtype=np.float64)
        for i, v in enumerate(self.values(texts)):
            if len(v):
                out[i] = float(np.mean(v))
        n_nan = int(np.isnan(out).sum())
        if n_nan:
            log.warning("%d of %d text(s) have no neighbours; their neighbour value is NaN", n_nan, len(texts))
        return out


def neighbour_values(target: MaskedLM, texts: Sequence[str], *, generator=None,
                     neighbourhood: NeighbourhoodConfig | None = None, signal: SignalConfig | None = None,
                     cache: SignalCache | None = None, device=None, progress: bool = True) -> np.ndarray:
    """Mean target signal value (energy, PLL or causal mean NLL) of each text's neighbours.

    See :meth:`NeighbourRecipe.mean_values`.

    Parameters
    ----------
    target : MaskedLM
        The model under audit; neighbours are re-tokenised by its tokenizer.
    texts : sequence of str, length n_texts
    generator : MaskedLM, (model, tokenizer) or str, optional
        Default: the local folder in ``neighbourhood.generator_model``.
    neighbourhood : NeighbourhoodConfig, optional
    signal : SignalConfig, optional
    cache : SignalCache, optional
        Caches neighbours (as edits) and their values: re-runs and new targets reuse them.

    Returns
    -------
    ndarray of shape (n_texts,), dtype float64
        In the unit of ``signal.kind``; NaN for a text without neighbours.

    Raises
    ------
    ValueError
        No generator is given and ``neighbourhood.generator_model`` is None, or the
        generator has no trained MLM head.
    """
    recipe = NeighbourRecipe(generator, neighbourhood=neighbourhood, signal=signal, target=target, cache=cache,
                             device=device, progress=progress)
    return recipe.mean_values(texts)
