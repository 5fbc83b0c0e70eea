"""DC-PDD: token probabilities calibrated by the tokens' frequencies in a reference corpus.

Zhang et al. (2024), "Pretraining Data Detection for Large Language Models: A
Divergence-based Calibration Method", EMNLP, Sec. 3: for the scored tokens ``x_t`` of
a text, with the model's probability ``p_t = p(x_t | context)`` and the token's
Laplace-smoothed frequency ``f(x_t)`` in a reference corpus
(:mod:`mlflow_mia.signals.token_frequency`),

    alpha_t = p_t * log(1 / f(x_t)),         (a term of the cross-entropy between the two)
    alpha_t <- min(alpha_t, a),              (clipped: no token dominates)
    beta(x) = mean of alpha_t over FOS(x),   (the first occurrence of each distinct token)

and a larger ``beta`` means member: a token the model predicts well is evidence in
proportion to how rare it is in general text. **Higher = member**, as the paper's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attacks.base import Attack, get_attack, register_attack
from mlflow_mia.attacks.inputs import AttackInput, declare_input
from mlflow_mia.option import option
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.dispatch import signal_config_for
from mlflow_mia.signals.energy import tokenize, value_settings
from mlflow_mia.signals.token_frequency import (corpus_counts, corpus_ids, load_counts, log_frequencies,
                                                vocab_size)

__all__: list[str] = []

#: The ``frequencies`` value that counts the audit's population texts.
POPULATION = "population"


@dataclass(frozen=True)
class DcPddSettings:
    """Settings of :class:`DcPddAttack`.

    Attributes
    ----------
    clip : float
        ``a``, the upper bound of each calibrated token score (> 0, default 0.01, the
        authors' code's and MIMIR's default; option ``dc_pdd_clip``).
    frequencies : str
        Where the token frequencies come from: ``"population"`` (default: the audit's
        population texts) or a ``.npy``/``.json`` file of counts, one per token id of the
        target's tokenizer (option ``dc_pdd_frequencies``).

    Raises
    ------
    ValueError
        ``clip`` not a positive finite number; ``frequencies`` neither ``"population"`` nor
        an existing ``.npy``/``.json`` file.
    """

    clip: float = option(0.01, "DC-PDD: upper bound a of each calibrated token score p log(1/f)", key="dc_pdd_clip",
                         gt=0, metavar="A")
    frequencies: str = option(POPULATION, "DC-PDD: token frequencies from the population texts ('population') or "
                              "a .npy/.json file of counts per token id", key="dc_pdd_frequencies", metavar="PATH")

    def __post_init__(self):
        clip = self.clip
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 < clip < float("inf"):
            raise ValueError(f"dc_pdd clip must be a finite number > 0, got {clip!r}")
        object.__setattr__(self, "clip", float(clip))
        f = self.frequencies
        if f != POPULATION and not (isinstance(f, str) and f.endswith((".npy", ".json")) and os.path.isfile(f)):
            raise ValueError(f"dc_pdd frequencies must be 'population' or an existing .npy/.json file of token "
                             f"counts, got {f!r}")


def first_occurrences(ids) -> np.ndarray:
    """Mask of the positions where a token id occurs for the first time (bool, same shape as ``ids``).

    >>> first_occurrences([5, 3, 5, 7, 3]).tolist()
    [True, True, False, True, False]
    """
    ids = np.asarray(ids)
    mask = np.zeros(len(ids), dtype=bool)
    mask[np.unique(ids, return_index=True)[1]] = True
    return mask


def dc_pdd_score(logprobs, ids, token_log_freq, clip: float) -> float:
    """``beta``: the mean of ``min(p_t log(1 / f(x_t)), a)`` over the first occurrences (Zhang et al. 2024, Sec. 3).

    Parameters
    ----------
    logprobs : array-like of shape (n,)
        ``log p_t`` of the scored tokens (nats).
    ids : array-like of shape (n,), int
        Their token ids (which positions are first occurrences).
    token_log_freq : array-like of shape (n,)
        ``log f(x_t)`` of each scored token (nats, < 0).
    clip : float
        ``a``.

    Returns
    -------
    float: unitless (probability x nats), in [0, a]; NaN for no token.

    >>> round(dc_pdd_score(np.log([0.5, 0.2, 0.9]), [1, 2, 1], np.log([0.25, 0.25, 0.25]), 1.0), 6)
    0.485203
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return float("nan")
    keep = first_occurrences(ids)
    alpha = np.exp(np.asarray(logprobs, dtype=np.float64)[keep]) * -np.asarray(token_log_freq, np.float64)[keep]
    return float(np.mean(np.minimum(alpha, clip)))


def leave_one_out_log_freq(ids, counts, own) -> np.ndarray:
    """``log f(x_t)`` of tokens ``ids`` in the corpus of ``counts`` without one of its texts (its token ids ``own``).

    ``f(v) = (c(v) - c_own(v) + 1) / (N - len(own) + |V|)``: the text is scored against a
    corpus it is not part of, as the pool's texts are.

    >>> np.exp(leave_one_out_log_freq([0, 1], np.array([3, 1]), np.array([0]))).round(3).tolist()
    [0.6, 0.4]
    """
    ids, counts = np.asarray(ids, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    own_counts = dict(zip(*np.unique(np.asarray(own, dtype=np.int64), return_counts=True)))
    c = counts[ids] - np.array([own_counts.get(int(v), 0) for v in ids], dtype=np.int64)
    return np.log(c + 1.0) - np.log(float(counts.sum()) - len(own) + len(counts))


def scored_ids(lm, texts, config) -> list[np.ndarray]:
    """The token ids of the scored tokens of each text's signal, in its ``token_logprobs`` order.

    A causal LM: tokens 2..n of the signal's tokenisation; a masked LM with the PLL:
    every maskable token, masked one at a time in order.
    """
    ids, maskable, _ = tokenize(lm, texts, max_length=value_settings(lm, config)["max_length"])
    if isinstance(lm, CausalLM):
        return [x[1:] for x in ids]
    return [x[m] for x, m in zip(ids, maskable)]


def _dc_pdd(stage) -> np.ndarray:
    """Stage 1's ``dc_pdd_beta``: ``beta`` of every text (population texts against the corpus without themselves)."""
    settings = get_attack("dc_pdd", stage.config).settings
    target, signal = stage.models.target, stage.computed["target"]
    if signal.kind not in ("causal", "pll"):
        raise ValueError(DcPddAttack.energy_refusal)
    config = signal_config_for(target, stage.config.signal)
    ids = scored_ids(target, list(stage.texts), config)
    bad = next((i for i, (x, lp) in enumerate(zip(ids, signal.token_logprobs)) if len(x) != len(lp)), None)
    if bad is not None:
        raise RuntimeError(f"dc_pdd: text {bad} has {len(signal.token_logprobs[bad])} scored log-probs but "
                           f"{len(ids[bad])} token ids; the target's signals were computed with other settings")
    loo = {}
    if settings.frequencies == POPULATION:
        if stage.n_pool is None:
            raise ValueError("dc_pdd counts the population's tokens: stage one must say which texts are the "
                             "population (StageOne.n_pool), or give a frequency file (dc_pdd_frequencies)")
        population = list(stage.texts[stage.n_pool:])
        cache_dir = os.path.dirname(stage.cache.path) if stage.cache is not None else None
        counts = corpus_counts(target, population, cache_dir=cache_dir)
        loo = dict(zip(range(stage.n_pool, len(stage.texts)), corpus_ids(target, population)))
    else:
        counts = load_counts(settings.frequencies, vocab_size(target))
    log_freq = log_frequencies(counts)
    out = np.empty(len(ids), dtype=np.float64)
    for i, (x, lp) in enumerate(zip(ids, signal.token_logprobs)):
        lf = leave_one_out_log_freq(x, counts, loo[i]) if i in loo else log_freq[x]
        out[i] = dc_pdd_score(lp, x, lf, settings.clip)
    return out


declare_input(AttackInput(
    "dc_pdd_beta", rows="values", roles=("target",), compute=_dc_pdd,
    how_to_provide="the DC-PDD scores are computed by the audit when 'dc_pdd' is requested "
                   "(mlflow_mia.attacks.dc_pdd.dc_pdd_score over the target's token log-probs)",
    description="DC-PDD's beta: the mean over first-occurrence tokens of min(p log(1/f), a), p the target's token "
                "probability and f the token's smoothed frequency in the reference corpus (Zhang et al. 2024)."))


@register_attack
class DcPddAttack(Attack):
    """Score = DC-PDD's ``beta`` (Zhang et al. 2024, Sec. 3; unitless, in [0, a], higher = member).

    The scored tokens and their probabilities are the target's signal's: for a causal LM,
    tokens 2..n with ``p(x_t | x_<t)``; for a masked LM with ``signal="pll"``, every token
    with ``p(x_t | x without x_t)``, each masked once (the paper's probability with the
    context on both sides). The first occurrence of each distinct token id counts once.
    The frequencies are counted, once per audit, over the population texts (without
    the special tokens the tokenizer adds) or read from a frequency file; a population
    text is scored against the counts without its own tokens (leave-one-out), as the
    pool's texts are against a corpus they are not part of.

    Where the references differ: the authors' code (``zhang-wei-chao/DC-PDD``,
    ``com_det_sco.py``) counts C4 files, scores tokens 2..n and returns ``-beta`` under
    its larger-is-non-member convention (here ``beta``, the same ranking); it reads the
    unsmoothed counts, so a token unseen in the corpus gets ``log(1/0)`` and is clipped
    to ``a``, where here Laplace smoothing gives it ``log(N + |V|)`` (the paper's and
    MIMIR's smoothing). MIMIR (``mimir/attacks/dc_pdd.py``) prepends an EOS token so the
    first token is scored too; here, as the authors, it is not (a tokenizer that adds a
    BOS, such as Llama's, has its first word scored given BOS in both). The reference
    corpus is the population (or a file), not C4.

    Masked LMs with the energy: refused (:attr:`energy_refusal`).

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult.from_arrays([1.0, 2.0], n_tokens=[3, 3], kind="causal")
    >>> DcPddAttack()(AttackInputs(("a", "b"), target=sig, dc_pdd_beta=[0.004, 0.002])).tolist()
    [0.004, 0.002]
    """

    name = "dc_pdd"
    citation = "Zhang et al. 2024 (DC-PDD)"
    requires = ("target", "dc_pdd_beta")
    Settings = DcPddSettings
    # Not in a release gate's default set: not measured on the demos yet (its frequencies come from the
    # population, not a large general corpus as in the paper).
    gate_min_references = None
    energy_refusal: ClassVar[str] = (
        "attack 'dc_pdd' needs each token's probability once, in text order (the first occurrence of each token "
        "counts): a causal LM's, or a masked LM's pseudo-log-likelihood (signal='pll'); the masked energy's random "
        "masks score some tokens several times and others never, so DC-PDD is refused with signal='energy'")

    def score(self, inputs):
        if inputs.target.kind not in ("causal", "pll"):
            raise ValueError(self.energy_refusal)
        return np.asarray(inputs.dc_pdd_beta, dtype=np.float64)
