"""Per-token log-probabilities of texts under a causal LM, in one forward pass per batch.

For a text tokenised as ``x_1 .. x_n`` (with the special tokens the tokenizer adds
itself, e.g. Llama's BOS; none is prepended otherwise, so the first token is not
scored), the signal keeps, for ``t = 2..n``,

    log p(x_t | x_<t)                       (nats, <= 0)
    mu_t = E_{v~p(.|x_<t)}[log p(v)]          (Min-K%++, Zhang et al. 2024, Sec. 3)
    sigma_t = sd_{v~p(.|x_<t)}[log p(v)]

and its value is the mean NLL per predicted token, ``-(1/(n-1)) sum_t log p(x_t |
x_<t)`` (nats/token: Yeom et al. 2018's loss, MIMIR's ``loss``). The per-token
values fill the same :class:`~mlflow_mia.signals.types.SignalResult` fields as the
masked energy's, so ``loss``, ``zlib``, ``min_k``, ``min_k_plus_plus``,
``likelihood_ratio``, ``lira_offline``, ``rmia`` and ``neighbourhood`` read them
unchanged (``kind="causal"``).

How it is computed:

* texts are sorted by length and packed into batches of at most ``token_budget``
  padded tokens (:mod:`mlflow_mia.signals.batching`), right-padded with an
  attention mask: with causal attention a real token never sees the padding after
  it, so the values equal those of batch size 1 (a test checks it);
* the model runs once per batch up to the input of its vocabulary projection
  (the projection itself is skipped); the scored positions' hidden states are
  projected :data:`HEAD_POSITIONS` positions and ``vocab_block`` words at a time with a
  running log-sum-exp and running moments
  (:func:`~mlflow_mia.signals.token_stats.blocked_logprob_stats`), so no
  ``batch x length x vocabulary`` tensor of logits or log-probs is ever held;
* models whose logits are not a plain projection of what the output embeddings
  receive (logit scaling or soft-capping) fall back to the model's own logits, one
  batch at a time (:meth:`~mlflow_mia.signals.causal_model.CausalLM.projection`);
* rows are cached like the masked signals (:class:`~mlflow_mia.signals.cache.SignalCache`,
  keyed by weights, config and tokenizer digests and the value settings).

Where MIMIR differs: MIMIR (``mimir/models.py:get_ll``) scores one text per forward
pass and takes ``log_softmax`` over full logits; the values are the same to float32
rounding (``benchmarks/bench_causal.py`` measures the difference and the speed).
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import torch
from mlflow_mia.progress import bar as progress_bar

from mlflow_mia.config import SignalConfig
from mlflow_mia.data import text_hash
from mlflow_mia.hashing import keyed_hash
from mlflow_mia.signal_kinds import register_signal_kind
from mlflow_mia.signals.batching import bucket_width, pad_batch, plan_batches, run_batches
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.causal_model import CausalLM, capture_projection_input
from mlflow_mia.signals.energy import keep_rows, tokenize, value_settings
from mlflow_mia.signals.model import blocked_target_logprobs
from mlflow_mia.signals.runtime import (DeviceResults, HeapTrimmer, autocast_for, default_token_budget,
                                        dtype_setting, resolve_device, resolve_dtype, to_device, uses_length_buckets)
from mlflow_mia.signals.token_stats import STATS_COLUMNS, blocked_logprob_stats, logprob_stats_of_logits
from mlflow_mia.signals.types import SignalResult, result_from_rows
from mlflow_mia.signals.placement import place_model

__all__ = ["causal_token_logprobs", "compute_causal_signals"]

log = logging.getLogger(__name__)

#: Scored positions per call of the vocabulary projection (CPU; on CUDA :data:`CUDA_HEAD_POSITIONS`).
HEAD_POSITIONS = 512
#: The same on CUDA for the blocked projection: fewer, larger products (an 8192 x 4096 float32 block is 128 MiB);
#: values do not depend on it.
CUDA_HEAD_POSITIONS = 8192
#: Vocabulary rows per block of the projection.
VOCAB_BLOCK = 4096


def _head(features: torch.Tensor, decoder: torch.nn.Linear, targets: torch.Tensor, stats: bool,
          rows: int = HEAD_POSITIONS) -> torch.Tensor:
    """``(log p, mu, sigma, top1)`` (stats) or ``log p`` of each row of ``features``, ``rows`` rows at a time."""
    out = torch.empty((len(features), len(STATS_COLUMNS)) if stats else len(features), dtype=torch.float32,
                      device=features.device)
    kernel = blocked_logprob_stats if stats else blocked_target_logprobs
    for start in range(0, len(features), rows):
        stop = start + rows
        out[start:stop] = kernel(features[start:stop], decoder.weight, decoder.bias, targets[start:stop], VOCAB_BLOCK)
    return out


def _from_logits(logits: torch.Tensor, targets: torch.Tensor, stats: bool, rows: int = HEAD_POSITIONS) -> torch.Tensor:
    """The fallback head: rows of full logits, ``rows`` at a time, in float32."""
    out = torch.empty((len(logits), len(STATS_COLUMNS)) if stats else len(logits), dtype=torch.float32,
                      device=logits.device)
    for start in range(0, len(logits), rows):
        stop = start + rows
        res = logprob_stats_of_logits(logits[start:stop], targets[start:stop])
        out[start:stop] = res if stats else res[:, 0]
    return out


def causal_token_logprobs(lm: CausalLM, ids: Sequence[np.ndarray], *, token_budget: int | None = None, device=None,
                          dtype: torch.dtype = torch.float32, progress=None, stats: bool = True,
                          buckets: bool | None = None) -> list[np.ndarray]:
    """``log p(x_t | x_<t)`` for ``t = 2..n`` of each token sequence, from one forward pass per batch.

    Parameters
    ----------
    lm : CausalLM
    ids : sequence of ndarray (int64), each of length n_i >= 2
        Token ids of each text (with the tokenizer's own special tokens).
    token_budget : int, optional
        Padded tokens per forward pass; default :func:`~mlflow_mia.signals.runtime.default_token_budget`
        (on CUDA sized to the device's free memory). A batch that runs out of memory is
        halved and retried (:func:`~mlflow_mia.signals.batching.run_batches`).
    device : str or torch.device, optional
    dtype : torch.dtype
        Compute type of the model's products (``torch.autocast``; float32: none); the
        log-softmax is taken in float32 whatever it is.
    progress : tqdm or None
        Updated by the number of texts done after each batch.
    stats : bool
        Also return Min-K%++'s ``mu`` and ``sigma`` and EZ-MIA's ``top1`` flag of each position
        (default True).
    buckets : bool, optional
        Pad each batch to a length bucket (:func:`~mlflow_mia.signals.batching.bucket_width`);
        default :func:`~mlflow_mia.signals.runtime.uses_length_buckets` (on CUDA). Right
        padding comes after every real token, so the values do not depend on it (to float
        rounding). The scores stay on the device until the end and come back in one copy.

    Returns
    -------
    list of ndarray (float32), one per text
        Shape (n_i - 1,) of log-probs in nats; with ``stats``, shape (n_i - 1, 4):
        columns ``log p``, ``mu``, ``sigma`` (nats) and ``top1`` (1.0 where ``x_t`` is the
        model's argmax at ``t``).

    Raises
    ------
    ValueError
        A sequence of fewer than 2 tokens (nothing to predict).
    """
    short = next((i for i, x in enumerate(ids) if len(x) < 2), None)
    if short is not None:
        raise ValueError(f"text {short} has {len(ids[short])} token(s); a causal LM scores tokens 2..n, so each "
                         "text needs at least 2 tokens: drop or lengthen it")
    device = resolve_device(device)
    device = place_model(lm.model, device)  # a model placed by accelerate stays where it is
    decoder = lm.projection()
    token_budget = token_budget or default_token_budget(device, model=lm.model, dtype=dtype,
                                                        vocab_logits=decoder is None)
    buckets = uses_length_buckets(device) if buckets is None else buckets
    width = (lambda n: bucket_width(n, lm.max_length)) if buckets else None
    head_rows = CUDA_HEAD_POSITIONS if device.type == "cuda" else HEAD_POSITIONS
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    out: list = [None] * len(ids)
    trimmer = HeapTrimmer()
    results = DeviceResults(device)  # each batch's scores, copied to the host once at the end

    def step(rows: np.ndarray) -> None:
        batch, attention = pad_batch([ids[i] for i in rows], lm.pad_id,
                                     width(int(lengths[rows].max())) if width else None)
        n_scored = lengths[rows] - 1
        row_idx = np.repeat(np.arange(len(rows)), n_scored)
        col_idx = np.concatenate([np.arange(n) for n in n_scored])
        targets = to_device(batch[row_idx, col_idx + 1], device)
        inputs = to_device(batch, device), to_device(attention, device)
        r, c = to_device(row_idx, device), to_device(col_idx, device)
        if decoder is not None:
            hidden = capture_projection_input(lm.model, decoder, *inputs)
            scored = _head(hidden[r, c], decoder, targets, stats, head_rows)
        else:
            logits = lm.model(input_ids=inputs[0], attention_mask=inputs[1]).logits
            scored = _from_logits(logits[r, c], targets, stats)  # full-vocabulary rows: 512 at a time
            del logits
        results.add((rows, n_scored), scored)
        if progress is not None:
            progress.update(len(rows))
        trimmer.after_batch(batch.shape)

    with torch.inference_mode(), autocast_for(dtype, device):
        run_batches(plan_batches(lengths, token_budget, width=width), lengths, step, width=width, device=device)
    for (rows, n_scored), scored in results.to_host():
        offset = 0
        for i, n in zip(rows, n_scored):
            out[i] = scored[offset:offset + n]
            offset += n
    return out


def compute_causal_signals(lm: CausalLM, texts: Sequence[str], config: SignalConfig | None = None, *,
                           cache: SignalCache | None = None, device=None, progress: bool = True,
                           chunk_size: int = 512, desc: str | None = None, mask_keys=None,
                           text_key=None, stats: bool = True) -> SignalResult:
    """Mean NLL per predicted token, per-token log-probs and Min-K%++ statistics of every text under a causal LM.

    Parameters
    ----------
    lm : CausalLM
    texts : sequence of str, length n_samples
    config : SignalConfig, optional
        ``kind`` must be ``"causal"``; ``max_length``, ``token_budget`` and
        ``dtype`` apply, the mask settings do not.
    cache : SignalCache, optional
        Rows found there are not recomputed; new rows are written chunk by chunk.
    device, progress, chunk_size, desc
        As for :func:`mlflow_mia.signals.energy.compute_signals`.
    mask_keys : ignored
        Accepted for a common signature with the masked signals (nothing here is random).
    stats : bool, ignored
        Accepted for a common signature with the masked signals: the Min-K%++ moments are
        always computed here, since they come from the vocabulary blocks the log-probs need
        anyway (``benchmarks/bench_causal.py`` measures their cost within its noise).
    text_key : HashKey, bytes or str, optional
        Cache rows named by the keyed hash of each text (see
        :func:`mlflow_mia.signals.energy.compute_signals`).

    Returns
    -------
    SignalResult
        ``kind="causal"``; ``values`` the mean NLL per predicted token (nats/token,
        shape (n_samples,), float64); ``token_logprobs[i]`` of shape (n_i - 1,) for
        tokens 2..n; ``token_mu``/``token_sigma`` aligned with them; ``n_tokens`` the
        text's tokens that are not special tokens the tokenizer added (as for the
        masked signals); ``truncated`` texts longer than the token limit, scored on
        their first tokens.

    Raises
    ------
    ValueError
        ``config.kind`` is not ``"causal"``; a text with fewer than 2 tokens.

    References
    ----------
    Yeom et al. (2018); Carlini et al. (2021); Zhang et al. (2024), Sec. 3.

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_gpt2
    >>> lm = CausalLM(*tiny_gpt2())
    >>> res = compute_causal_signals(lm, ["the cat sat on the mat"], SignalConfig(kind="causal"), progress=False)
    >>> res.kind, res.token_logprobs[0].shape, bool(res.values[0] > 0)
    ('causal', (5,), True)
    """
    config = config or SignalConfig(kind="causal")
    if config.kind != "causal":
        raise ValueError(f"compute_causal_signals needs SignalConfig(kind='causal'), got kind={config.kind!r}")
    texts = list(texts)
    hashes = [text_hash(t) for t in texts]
    if text_key is not None:
        hashes = [keyed_hash(h, text_key) for h in hashes]
    settings = {**value_settings(lm, config), **dtype_setting(config.dtype, resolve_device(device))}
    spec = {"weights": lm.weights_id, "config": lm.config_id, "tokenizer_id": lm.tokenizer_id, **settings}
    if text_key is not None:
        spec["rows"] = "hmac"
    key = cache.register(spec) if cache is not None else None
    unique = dict(zip(hashes, texts))
    rows = cache.get_many(key, unique) if cache is not None else {}
    rows = {h: row for h, row in rows.items() if row[4] is not None}
    todo = [h for h in unique if h not in rows]
    if todo:
        first_row: dict[str, int] = {}
        for i, h in enumerate(hashes):
            first_row.setdefault(h, i)
        ids, maskable, truncated = tokenize(lm, [unique[h] for h in todo], max_length=settings["max_length"],
                                            rows=[first_row[h] for h in todo])
        if truncated.any():
            log.warning("%d of %d texts are longer than %d tokens and are truncated to their first %d tokens",
                        int(truncated.sum()), len(todo), settings["max_length"], settings["max_length"])
        short = next((j for j, x in enumerate(ids) if len(x) < 2), None)
        if short is not None:
            raise ValueError(f"the text of row {first_row[todo[short]]} has {len(ids[short])} token; a causal LM "
                             "scores tokens 2..n given those before them, so each text needs at least 2 tokens: "
                             "drop or lengthen it")
        bar = progress_bar(total=len(todo), desc=desc or f"causal {lm.name}", unit="text", progress=progress,
                           leave=False)
        try:
            for start in range(0, len(todo), chunk_size):
                chunk = range(start, min(start + chunk_size, len(todo)))
                scored = causal_token_logprobs(lm, [ids[j] for j in chunk], token_budget=config.token_budget,
                                               device=device, dtype=resolve_dtype(config.dtype, resolve_device(device)), progress=bar)
                new = {}
                for j, s in zip(chunk, scored):
                    logprobs = np.ascontiguousarray(s[:, 0])
                    nll = -float(np.mean(logprobs, dtype=np.float64))
                    new[todo[j]] = (nll, len(maskable[j]), bool(truncated[j]), logprobs,
                                    np.ascontiguousarray(s[:, 1:].T))
                keep_rows(cache, key, rows, new)
        finally:
            bar.close()
    return result_from_rows(rows, hashes, "causal")


register_signal_kind("causal", model="causal", unit="nats/token", compute=compute_causal_signals)
