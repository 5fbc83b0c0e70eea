"""Is the neighbour generator good enough for the neighbourhood attack to mean anything?

The neighbourhood attack (Mattern et al. 2023, Sec. 2-3) compares a text's loss with
the mean loss of close variants. Its premise is that a neighbour is *close*: one
word swapped for a plausible one, so that the target's loss moves by little more
than what the swap itself costs. A weak generator (a small model trained from
scratch, a random head) proposes ill-fitting words; each such swap moves the
target's loss by more than the whole member/non-member gap, and the difference
``mean_j E(x_j) - E(x)`` is then dominated by swap noise: the attack reads "no
leak" where the loss attack alone finds one. This module measures two things
before the attack's AUC is read, and says when it should not be trusted.

Checks
------
``generator_accuracy`` (metric ``neighbourhood/generator_accuracy``)
    Top-1 masked-token accuracy of the generator on population texts. From a
    seeded sample of at most ``n_texts`` population texts, every replaceable word
    (as the generator would perturb it, :func:`~mlflow_mia.signals.neighbours.replaceable_words`)
    is masked alone, at its first word piece, one word per copy; a hit is
    ``argmax_w p(w | x_{\\i}) == x_i`` over the full vocabulary. Accuracy is
    hits / masked words (a float in [0, 1]; NaN when no text has a replaceable word).

``neighbour_shift_over_gap`` (metric ``neighbourhood/neighbour_shift_over_gap``)
    The fraction of neighbours whose target score moved by more than the loss
    attack's member/non-member gap. With ``E`` the target's energy (or PLL, the
    audit's signal) in nats::

        gap   = | mean_{members} E(x) - mean_{non-members} E(x) |     (over the whole pool)
        shift = | E(x_j) - E(x) |   for each neighbour x_j of a pool text x
        neighbour_shift_over_gap = #{(x, x_j) : shift > gap} / #{(x, x_j)}

    counted over the neighbours of a seeded sample of at most ``n_texts`` pool
    texts (members and non-members alike). The labels are the auditor's own: the
    pool's membership is known to whoever runs the audit.

In an audit the check runs in two halves: :func:`measure_generator` in stage 1
(the models run: accuracy, and the target's values of the neighbours, read from
the audit's :class:`~mlflow_mia.signals.neighbour_recipe.NeighbourRecipe`) and
:func:`judge_generator` in stage 2 (numbers only: the gap, the fraction, the
verdict); :func:`check_generator` runs both.

Levels (documented in ``docs/explanations/neighbourhood.md``): the check fails when
``generator_accuracy < MIN_GENERATOR_ACCURACY`` or
``neighbour_shift_over_gap > MAX_SHIFT_OVER_GAP``; the audit then warns in the
log and the report with :data:`WARNING_TEXT`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from mlflow_mia.config import AuditConfig
from mlflow_mia.signals.batching import pad_batch, plan_batches
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.runtime import resolve_device
from mlflow_mia.signals.neighbours import load_generator, replaceable_words
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe
from mlflow_mia.signals.placement import place_model

__all__ = ["GeneratorEvidence", "generator_accuracy", "measure_generator", "judge_generator", "check_generator"]

log = logging.getLogger(__name__)

#: Below this top-1 accuracy the generator cannot tell which words fit a context.
MIN_GENERATOR_ACCURACY = 0.30
#: Above this fraction, most neighbours move the target's score by more than the membership gap.
MAX_SHIFT_OVER_GAP = 0.50
WARNING_TEXT = ("neighbours from this generator are too far from the text; this attack's AUC is not evidence of "
                "no leakage")


@dataclass(frozen=True)
class GeneratorQuality:
    """Result of :func:`check_generator`.

    Attributes
    ----------
    accuracy : float
        Top-1 masked-token accuracy of the generator in [0, 1] (NaN: nothing to mask).
    shift_over_gap : float
        Fraction of neighbours with ``|E(x_j) - E(x)| > gap``, in [0, 1] (NaN: no neighbours).
    gap : float
        ``|mean member E - mean non-member E|`` over the pool, nats.
    median_shift : float
        Median ``|E(x_j) - E(x)|`` over the counted neighbours, nats.
    n_words, n_neighbours : int
        Masked words behind ``accuracy``; neighbour pairs behind ``shift_over_gap``.
    problems : list of str
        Why the check failed (empty when it passed).
    """

    accuracy: float
    shift_over_gap: float
    gap: float
    median_shift: float
    n_words: int
    n_neighbours: int
    problems: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def metrics(self, prefix: str = "neighbourhood/") -> dict[str, float]:
        """Flat metrics: ``generator_accuracy``, ``neighbour_shift_over_gap``, ``loss_gap``, ... under ``prefix``."""
        return {f"{prefix}generator_accuracy": self.accuracy, f"{prefix}neighbour_shift_over_gap": self.shift_over_gap,
                f"{prefix}loss_gap": self.gap, f"{prefix}median_neighbour_shift": self.median_shift,
                f"{prefix}generator_check_passed": float(self.passed)}

    def warning(self) -> str | None:
        """The text shown in the log and the report when the check failed, else None."""
        if self.passed:
            return None
        return f"neighbourhood: {WARNING_TEXT} ({'; '.join(self.problems)})"


def _sample(n: int, k: int, seed: int) -> np.ndarray:
    """``min(n, k)`` sorted indices into ``range(n)``, drawn without replacement from ``seed``."""
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def generator_accuracy(generator, texts: Sequence[str], *, n_texts: int = 200, seed: int = 0,
                       max_length: int | None = None, token_budget: int = 4096, device=None) -> tuple[float, int]:
    """Top-1 masked-token accuracy of ``generator`` at the words it would replace.

    Parameters
    ----------
    generator : MaskedLM, (model, tokenizer) or str
        The neighbour generator (fast tokenizer, trained MLM head).
    texts : sequence of str
        Population texts; a seeded sample of at most ``n_texts`` is used.
    n_texts : int
        Texts sampled (without replacement, ``numpy.random.default_rng(seed)``).
    max_length : int, optional
        Generator token limit (default: its own).
    token_budget : int
        Padded tokens per forward pass.

    Returns
    -------
    accuracy : float
        Hits / masked words, in [0, 1]; NaN when no sampled text has a replaceable word.
    n_words : int
        Masked words counted.

    Raises
    ------
    ValueError
        The generator has no MLM head or no fast tokenizer (:func:`load_generator`).
    """
    lm = load_generator(generator)
    device = resolve_device(device)
    chosen = [texts[i] for i in _sample(len(texts), n_texts, seed)]
    limit = min(max_length or lm.max_length, lm.max_length)
    ids, words = replaceable_words(lm.tokenizer, chosen, max_length=limit)
    copies = [(i, w.position) for i in range(len(chosen)) for w in words[i]]
    if not copies:
        return float("nan"), 0
    mask_id = lm.tokenizer.mask_token_id
    device = place_model(lm.model, device)  # a model placed by accelerate stays where it is
    hits = 0
    lengths = np.array([len(ids[i]) for i, _ in copies], dtype=np.int64)
    with torch.inference_mode():
        for rows in plan_batches(lengths, token_budget):
            batch, attention = pad_batch([ids[copies[c][0]] for c in rows], lm.tokenizer.pad_token_id)
            cols = torch.tensor([copies[c][1] for c in rows], dtype=torch.long)
            r_t = torch.arange(len(rows))
            input_ids = torch.from_numpy(batch)
            original = input_ids[r_t, cols].clone()
            input_ids[r_t, cols] = mask_id
            logits = lm.logits_at(input_ids.to(device), torch.from_numpy(attention).to(device), r_t.to(device),
                                  cols.to(device))
            hits += int((logits.argmax(dim=-1).cpu() == original).sum())
    return hits / len(copies), len(copies)


def neighbour_shift_over_gap(sample_energy: np.ndarray, neighbour_energy: Sequence[np.ndarray],
                             gap: float) -> tuple[float, float, int]:
    """Fraction of neighbours with ``|E(x_j) - E(x)| > gap``.

    Parameters
    ----------
    sample_energy : ndarray of shape (n_texts,), float
        Target energy of each text, nats.
    neighbour_energy : sequence (n_texts) of ndarray of shape (n_neighbours_i,)
        Target energy of each text's neighbours (may be empty).
    gap : float
        Member/non-member gap of the loss attack, nats (>= 0).

    Returns
    -------
    fraction : float
        In [0, 1]; NaN when there is no neighbour.
    median_shift : float
        Median ``|E(x_j) - E(x)|``, nats; NaN when there is no neighbour.
    n_pairs : int
        Neighbours counted.
    """
    shifts = [np.abs(np.asarray(nb, dtype=np.float64) - float(e)) for e, nb in zip(sample_energy, neighbour_energy)]
    flat = np.concatenate(shifts) if shifts else np.array([])
    if not len(flat):
        return float("nan"), float("nan"), 0
    return float(np.mean(flat > gap)), float(np.median(flat)), int(len(flat))


def loss_gap(energy: np.ndarray, labels: np.ndarray) -> float:
    """``|mean E over label 1 - mean E over label 0|`` in the unit of ``energy``."""
    energy, labels = np.asarray(energy, dtype=np.float64), np.asarray(labels)
    return float(abs(energy[labels == 1].mean() - energy[labels == 0].mean()))


@dataclass(frozen=True)
class GeneratorEvidence:
    """What :func:`measure_generator` measures with the models; :func:`judge_generator` reads it without them.

    Attributes
    ----------
    accuracy : float
        Top-1 masked-token accuracy of the generator on population texts, in [0, 1] (NaN: nothing to mask).
    n_words : int
        Masked words behind ``accuracy``.
    rows : ndarray of shape (n_checked,), int64
        The pool rows whose neighbours were checked (a seeded sample).
    neighbour_values : tuple (n_checked) of ndarray of shape (n_neighbours_i,), float64
        The target's value (energy, PLL or causal mean NLL; nats) of each neighbour of each checked row.
    """

    accuracy: float
    n_words: int
    rows: np.ndarray
    neighbour_values: tuple


def measure_generator(recipe, pool_texts: Sequence[str], population_texts: Sequence[str], *,
                      n_texts: int = 100) -> GeneratorEvidence:
    """Run the models the check needs: the generator's accuracy and the target's values of neighbours.

    Parameters
    ----------
    recipe : NeighbourRecipe
        The audit's neighbour recipe (:mod:`mlflow_mia.signals.neighbour_recipe`), with its
        target: neighbours and their values are the ones the attack reads.
    pool_texts : sequence of str, length n_pool
    population_texts : sequence of str
        Texts of the accuracy check.
    n_texts : int
        Texts sampled for each check (seed ``recipe.signal.seed``).

    Returns
    -------
    GeneratorEvidence
    """
    sc = recipe.signal
    acc, n_words = generator_accuracy(recipe.lm, population_texts, n_texts=n_texts, seed=sc.seed,
                                      max_length=sc.max_length, device=recipe.device)
    rows = _sample(len(pool_texts), n_texts, sc.seed)
    values = recipe.values([pool_texts[i] for i in rows])
    return GeneratorEvidence(accuracy=acc, n_words=n_words, rows=rows, neighbour_values=tuple(values))


def judge_generator(evidence: GeneratorEvidence, pool_values: np.ndarray, pool_labels: np.ndarray, *,
                    min_accuracy: float = MIN_GENERATOR_ACCURACY,
                    max_shift_over_gap: float = MAX_SHIFT_OVER_GAP) -> GeneratorQuality:
    """The verdict of the check from its evidence and the pool's target values: no model runs.

    Parameters
    ----------
    evidence : GeneratorEvidence
    pool_values : ndarray of shape (n_pool,), float
        The target's value of each pool text (nats), the unit of ``evidence.neighbour_values``.
    pool_labels : ndarray of shape (n_pool,), int
        1 = member, 0 = non-member: the loss gap is the auditor's own.

    Returns
    -------
    GeneratorQuality
        Failing checks are also logged as a warning.
    """
    acc = evidence.accuracy
    pool_values = np.asarray(pool_values, dtype=np.float64)
    gap = loss_gap(pool_values, pool_labels)
    frac, median, n_pairs = neighbour_shift_over_gap(pool_values[evidence.rows], evidence.neighbour_values, gap)
    problems = []
    if not np.isnan(acc) and acc < min_accuracy:
        problems.append(f"generator top-1 accuracy {acc:.3f} < {min_accuracy:g}")
    if not np.isnan(frac) and frac > max_shift_over_gap:
        problems.append(f"{frac:.0%} of neighbours moved the target's score by more than the member/non-member "
                        f"loss gap ({gap:.3g} nats) > {max_shift_over_gap:.0%}")
    quality = GeneratorQuality(accuracy=acc, shift_over_gap=frac, gap=gap, median_shift=median,
                               n_words=evidence.n_words, n_neighbours=n_pairs, problems=problems)
    if problems:
        log.warning("%s", quality.warning())
    return quality


def check_generator(target, generator, pool_texts: Sequence[str], pool_labels: np.ndarray, pool_energy: np.ndarray,
                    population_texts: Sequence[str], *, config: AuditConfig | None = None,
                    cache: SignalCache | None = None, n_texts: int = 100, device=None,
                    min_accuracy: float = MIN_GENERATOR_ACCURACY,
                    max_shift_over_gap: float = MAX_SHIFT_OVER_GAP) -> GeneratorQuality:
    """Both checks of the module docstring, with their verdict: :func:`measure_generator` then :func:`judge_generator`.

    Parameters
    ----------
    target : MaskedLM
        The audited model (its tokenizer re-tokenises neighbours).
    generator : MaskedLM, (model, tokenizer) or str
        The neighbour generator the attack uses.
    pool_texts, pool_labels, pool_energy : length n_pool
        Pool texts, labels (1 = member) and the target's value of each (nats).
    population_texts : sequence of str
        Texts for the accuracy check.
    config : AuditConfig, optional
        ``neighbourhood`` and ``signal`` settings, as for the attack (so neighbours
        and their values come from the same recipe and cache).
    n_texts : int
        Texts sampled for each check (seed ``config.signal.seed``).

    Returns
    -------
    GeneratorQuality
    """
    recipe = NeighbourRecipe.for_audit(generator, config or AuditConfig(), target=target, cache=cache, device=device,
                                       progress=False)
    evidence = measure_generator(recipe, pool_texts, population_texts, n_texts=n_texts)
    return judge_generator(evidence, pool_energy, pool_labels, min_accuracy=min_accuracy,
                           max_shift_over_gap=max_shift_over_gap)
