"""A causal LM's log-likelihood of each text conditioned on a shared prefix: ReCaLL's ``LL(x | P)``.

Xie et al. (2024), "ReCaLL: Membership Inference via Relative Conditional
Log-Likelihoods", Sec. 3: the prefix ``P`` is a few non-member texts ("shots")
joined together; ``LL(x | P)`` is the mean log-probability of the tokens of ``x``
when the model reads ``P`` first. This module computes it for many texts with one
shared prefix:

* the prefix is the shots joined with no separator (the authors' ``"".join``),
  tokenised once with the tokenizer's own leading special tokens (Llama's BOS) and
  without trailing ones; each text's token ids are those of its causal signal
  (:func:`~mlflow_mia.signals.energy.tokenize`, same truncation) without the leading
  special tokens the tokenizer added, so no BOS lands mid-sequence;
* the sequence ``P + x`` of every text runs in batches of at most ``token_budget``
  padded tokens, right-padded (a real token never sees the padding after it), and
  only the text's positions are projected onto the vocabulary: prefix tokens are
  never scored. Every token of ``x`` is scored, the first one given the prefix's last
  token (the authors' labels: prefix positions set to -100, the text's all kept);
* when ``P + x`` does not fit the model's limit for the longest text, shots are
  dropped from the front until it does (the authors keep the last shots that fit);
  :func:`fit_prefix` raises when not even one does;
* rows are cached (:class:`~mlflow_mia.signals.cache.SignalCache`) under a key that
  holds the model, the value settings and the prefix's token ids' digest.

The prefix is re-read for each text: the cost per text is that of ``len(P) + len(x)``
tokens (no key-value cache is shared between texts).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals.batching import pad_batch, plan_batches
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.causal_model import CausalLM, capture_projection_input
from mlflow_mia.signals.energy import tokenize, value_settings
from mlflow_mia.signals.runtime import (autocast_for, default_token_budget, dtype_setting, resolve_device,
                                        resolve_dtype)
from mlflow_mia.signals.placement import place_model

__all__ = ["conditional_loglik"]

#: Scored positions per call of the vocabulary projection.
HEAD_ROWS = 512


def text_parts(ids: Sequence[np.ndarray], maskable: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each text's token ids from its first token that is not a special token the tokenizer added (shape (m_i,)).

    >>> text_parts([np.array([1, 7, 8])], [np.array([1, 2])])[0].tolist()
    [7, 8]
    """
    return [np.asarray(x[m[0]:], dtype=np.int64) for x, m in zip(ids, maskable)]


def _prefix_ids(lm: CausalLM, text: str) -> np.ndarray:
    """``text``'s token ids with the tokenizer's leading special tokens and without trailing ones."""
    ids, maskable, _ = tokenize(lm, [text], max_length=10**9)
    return ids[0][:maskable[0][-1] + 1]


def fit_prefix(lm: CausalLM, shots: Sequence[str], *, room: int) -> tuple[np.ndarray, int]:
    """The prefix of the most shots, dropped from the front, whose token ids fit ``room`` tokens.

    Parameters
    ----------
    lm : CausalLM
    shots : sequence of str
        The prefix texts, in order (joined with no separator).
    room : int
        Tokens left for the prefix: the model's limit minus the longest text's tokens.

    Returns
    -------
    prefix : ndarray (int64) of shape (p,), p >= 1
    n_used : int
        How many shots it holds (its last ``n_used`` of ``shots``).

    Raises
    ------
    ValueError
        No shots, or not even the last shot fits ``room``.
    """
    if not shots:
        raise ValueError("ReCaLL needs at least one prefix text (shot)")
    for start in range(len(shots)):
        prefix = _prefix_ids(lm, "".join(shots[start:]))
        if 1 <= len(prefix) <= room:
            return prefix, len(shots) - start
    raise ValueError(f"ReCaLL's prefix does not fit: one shot needs {len(_prefix_ids(lm, shots[-1]))} tokens and the "
                     f"model's limit leaves {max(room, 0)} beside the longest text; lower max_length (the texts' "
                     "token limit) or draw shorter population texts")


def _scored_logprobs(features: torch.Tensor, decoder: torch.nn.Linear, targets: torch.Tensor) -> torch.Tensor:
    """``log p(target)`` of each row of ``features`` through ``decoder``, HEAD_ROWS rows at a time, in float32."""
    out = torch.empty(len(features), dtype=torch.float32, device=features.device)
    for start in range(0, len(features), HEAD_ROWS):
        stop = start + HEAD_ROWS
        logits = torch.nn.functional.linear(features[start:stop], decoder.weight, decoder.bias).float()
        out[start:stop] = logits.log_softmax(-1).gather(1, targets[start:stop, None])[:, 0]
    return out


def conditional_token_logprobs(lm: CausalLM, prefix: np.ndarray, parts: Sequence[np.ndarray], *,
                               token_budget: int | None = None, device=None,
                               dtype: torch.dtype = torch.float32) -> list[np.ndarray]:
    """``log p(x_j | P, x_<j)`` for every token ``x_j`` of every text, the prefix ``P`` read first.

    Parameters
    ----------
    lm : CausalLM
    prefix : ndarray (int64) of shape (p,), p >= 1
    parts : sequence of ndarray (int64), each of shape (m_i,), m_i >= 1
        The texts' token ids (:func:`text_parts`).
    token_budget : int, optional
        Padded tokens per forward pass (default :func:`~mlflow_mia.signals.runtime.default_token_budget`).
    device : optional
    dtype : torch.dtype
        Compute type of the model's products (``torch.autocast``); the log-softmax is float32.

    Returns
    -------
    list of ndarray (float32), one of shape (m_i,) per text: nats, <= 0.

    Raises
    ------
    ValueError
        An empty prefix or an empty text.
    """
    p = len(prefix)
    if p < 1 or any(len(x) < 1 for x in parts):
        raise ValueError("the prefix and every text need at least one token")
    device = resolve_device(device)
    device = place_model(lm.model, device)  # a model placed by accelerate stays where it is
    decoder = lm.projection()
    seqs = [np.concatenate([np.asarray(prefix, dtype=np.int64), x]) for x in parts]
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    out: list = [None] * len(seqs)
    with torch.inference_mode(), autocast_for(dtype, device):
        for rows in plan_batches(lengths, token_budget or default_token_budget(device)):
            batch, attention = pad_batch([seqs[i] for i in rows], lm.pad_id)
            m = lengths[rows] - p
            r = torch.from_numpy(np.repeat(np.arange(len(rows)), m)).to(device)
            c = torch.from_numpy(np.concatenate([np.arange(p - 1, p - 1 + k) for k in m])).to(device)
            ids, att = torch.from_numpy(batch).to(device), torch.from_numpy(attention).to(device)
            targets = ids[r, c + 1]
            if decoder is not None:
                scored = _scored_logprobs(capture_projection_input(lm.model, decoder, ids, att)[r, c], decoder,
                                          targets)
            else:  # logits scaled or capped after the projection: the model's own
                logits = lm.model(input_ids=ids, attention_mask=att).logits[r, c].float()
                scored = logits.log_softmax(-1).gather(1, targets[:, None])[:, 0]
            scored = scored.cpu().numpy()
            offset = 0
            for i, k in zip(rows, m):
                out[i] = scored[offset:offset + k]
                offset += k
    return out


@dataclass(frozen=True)
class ConditionalLogLik:
    """``LL(x | P)`` of each text and the prefix it was read after.

    Attributes
    ----------
    values : ndarray of shape (n_texts,), float64
        Mean log-probability per token of each text given the prefix (nats/token, <= 0).
    token_logprobs : tuple of ndarray (float32)
        Each text's per-token log-probs given the prefix (shape (m_i,)).
    n_shots : int
        Shots the prefix holds (the last ones of those given).
    prefix_tokens : int
        Its length in tokens.
    """

    values: np.ndarray
    token_logprobs: tuple
    n_shots: int
    prefix_tokens: int


def conditional_loglik(lm: CausalLM, texts: Sequence[str], shots: Sequence[str], config: SignalConfig | None = None,
                       *, cache: SignalCache | None = None, device=None) -> ConditionalLogLik:
    """ReCaLL's ``LL(x | P)`` of every text, ``P`` the shots joined (Xie et al. 2024, Sec. 3).

    Parameters
    ----------
    lm : CausalLM
    texts : sequence of str, length n_texts
    shots : sequence of str
        The prefix texts, in order; shots are dropped from the front when the prefix and
        the longest text do not fit the model's limit (:func:`fit_prefix`).
    config : SignalConfig, optional
        ``max_length`` (the texts' truncation, as for their causal signal), ``token_budget``, ``dtype``.
    cache : SignalCache, optional
        Rows found there (same model, settings and prefix) are not recomputed.
    device : optional

    Returns
    -------
    ConditionalLogLik

    Raises
    ------
    ValueError
        What :func:`fit_prefix` raises.

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_gpt2
    >>> res = conditional_loglik(CausalLM(*tiny_gpt2()), ["the cat sat"], ["a dog ran ."])
    >>> res.token_logprobs[0].shape, res.n_shots, bool(res.values[0] < 0)
    ((3,), 1, True)
    """
    config = config or SignalConfig(kind="causal")
    texts = list(texts)
    dev = resolve_device(device)
    settings = {**value_settings(lm, config), **dtype_setting(config.dtype, dev)}
    ids, maskable, _ = tokenize(lm, texts, max_length=settings["max_length"])
    parts = text_parts(ids, maskable)
    room = lm.max_length - max(len(x) for x in parts)
    prefix, n_used = fit_prefix(lm, list(shots), room=room)
    spec = {"weights": lm.weights_id, "config": lm.config_id, "tokenizer_id": lm.tokenizer_id, **settings,
            "conditional_prefix": hashlib.sha256(prefix.tobytes()).hexdigest()}
    key = cache.register(spec) if cache is not None else None
    hashes = [text_hash(t) for t in texts]
    rows = cache.get_many(key, dict.fromkeys(hashes)) if cache is not None else {}
    first = {h: i for i, h in reversed(list(enumerate(hashes)))}
    todo = [i for h, i in first.items() if h not in rows]
    if todo:
        got = conditional_token_logprobs(lm, prefix, [parts[i] for i in todo], token_budget=config.token_budget,
                                         device=dev, dtype=resolve_dtype(config.dtype, dev))
        new = {hashes[i]: (-float(np.mean(lp, dtype=np.float64)), len(lp), False, lp) for i, lp in zip(todo, got)}
        if cache is not None:
            cache.put_many(key, new)
        rows.update(new)
    return ConditionalLogLik(values=np.array([-rows[h][0] for h in hashes], dtype=np.float64),
                             token_logprobs=tuple(rows[h][3] for h in hashes), n_shots=n_used,
                             prefix_tokens=len(prefix))
