"""Masked energy and pseudo-log-likelihood of texts under a masked LM.

Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked Language
Models Using Membership Inference Attacks", Sec. 2.3, Eq. 2::

    E(s; theta) = -(1/K) sum_{I} sum_{i in I} log p_mlm(s_i | s_{\\I}; theta)

with K random subsets ``I`` of ``l = ceil(0.15 T)`` maskable positions, and the
pseudo-log-likelihood ("normalized energy", appendix A.3.2): every maskable
token masked once, the mean NLL per token. ``SignalConfig.energy_reduction =
"mean"`` divides each mask's sum by ``l`` (nats per masked token, A.3.2's
"loss ... averaging over 10 times"), so the energy no longer grows with length.

How it is computed (one code path for both signals):

* every (sample, mask) pair is one *masked copy*; copies of many samples share a
  forward pass, packed up to ``token_budget`` padded tokens, sorted by length so
  batches carry little padding;
* the encoder runs on the whole batch, the LM head only on the masked positions
  (for a 30k vocabulary that is most of the arithmetic of a small model);
* the NLL is ``logsumexp(logits) - logit[target]`` in float32: the vocabulary
  projection runs on the masked positions of several batches at once
  (``HEAD_POSITIONS``), a block of the vocabulary at a time with a running
  log-sum-exp, so no full row of logits is ever held; when asked (``stats``), the same pass
  keeps the first two moments of ``log p`` under the model's distribution (Min-K%++'s
  ``mu`` and ``sigma``, :mod:`mlflow_mia.signals.token_stats`), stored beside each
  token's log-prob;
* the C heap is trimmed when resident memory outgrows its level after the last
  trim (:class:`HeapTrimmer`), so peak memory stays that of one batch;
* texts stream through in chunks of ``chunk_size`` samples, each chunk written to
  the cache before the next starts: memory stays flat as the data grows, and a
  killed run resumes from the cache;
* masks come from ``(seed, sha256(text))``, so they do not depend on batch order
  and agree between two models whose tokenizers agree.

Texts longer than the model limit are truncated to their first tokens
(``SignalResult.truncated`` flags them and a warning gives the count).

Special-token strings typed in a text (``"[MASK] [SEP]"``, ``"<mask>"``) are
ordinary text: they are tokenised with ``split_special_tokens=True``, so a text
can neither smuggle in a mask token nor hide words from the masks. Only the
special tokens the tokenizer adds itself ([CLS] ... [SEP]) are unmaskable.
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
from mlflow_mia.signals.masking import pll_masks, sample_masks
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.runtime import (DeviceResults, HeapTrimmer, autocast_for, default_token_budget,
                                        dtype_setting, release_free_memory, resolve_device, resolve_dtype, to_device,
                                        token_limit, uses_length_buckets)
from mlflow_mia.signals.types import SignalResult, result_from_rows
from mlflow_mia.signals.placement import place_model

__all__ = ["tokenize"]

log = logging.getLogger(__name__)


# Masked positions per call of the vocabulary projection (features of several batches).
HEAD_POSITIONS = 512
# How texts become token ids (part of the cache key): special-token strings inside a text are split as text.
TOKENIZATION = "split_special_tokens"
# The signal kinds this module computes (registered at the end of the module).
MASKED_KINDS = ("energy", "pll")


def value_settings(lm: MaskedLM, config: SignalConfig) -> dict:
    """What besides the weights and tokenizer decides a signal's values: part of every cache key.

    The settings of :meth:`SignalConfig.cache_spec`, the token limit in force for
    ``lm`` and how texts are tokenised (:data:`TOKENIZATION`); speed settings
    (token budget, device) are left out. Used by the local cache and the Spark store.
    """
    return {**config.cache_spec(), "max_length": token_limit(config.max_length, lm.max_length),
            "tokenization": TOKENIZATION}


def tokenize(lm: MaskedLM, texts: Sequence[str], *, max_length: int,
             rows: Sequence[int] | None = None) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Token ids, maskable positions and truncation flags of each text.

    Special-token strings inside a text are tokenised as text (``split_special_tokens=True``):
    ``"[MASK]"`` typed in a text is never the mask id. ``rows`` gives the caller's row
    number of each text, used in the error message (default: positions in ``texts``).

    Returns
    -------
    ids : list of ndarray (int64), one per text, special tokens included
    maskable : list of ndarray (int64)
        Positions (into ``ids``) that are not special tokens (every position but
        those the tokenizer adds around the text).
    truncated : ndarray of shape (n_texts,), dtype bool

    Raises
    ------
    ValueError
        A text has no maskable token (e.g. only characters the tokenizer drops).
    """
    tok = lm.tokenizer
    full = tok(list(texts), add_special_tokens=True, truncation=False, verbose=False,
               return_special_tokens_mask=True, split_special_tokens=True)
    ids = [np.asarray(x, dtype=np.int64) for x in full["input_ids"]]
    special = [np.asarray(x, dtype=bool) for x in full["special_tokens_mask"]]
    truncated = np.array([len(x) > max_length for x in ids], dtype=bool)
    long_rows = np.flatnonzero(truncated)
    if len(long_rows):
        cut = tok([texts[i] for i in long_rows], add_special_tokens=True, truncation=True, max_length=max_length,
                  return_special_tokens_mask=True, split_special_tokens=True)
        for j, i in enumerate(long_rows):
            ids[i] = np.asarray(cut["input_ids"][j], dtype=np.int64)
            special[i] = np.asarray(cut["special_tokens_mask"][j], dtype=bool)
    maskable = [np.flatnonzero(~s) for s in special]
    empty = [i for i, m in enumerate(maskable) if len(m) == 0]
    if empty:
        raise ValueError(
            f"{len(empty)} text(s) have no maskable token after tokenization (first: row "
            f"{empty[0] if rows is None else rows[empty[0]]}); "
            "remove texts made only of characters the tokenizer drops"
        )
    return ids, maskable, truncated


def _is_hex(key) -> bool:
    try:
        int(key, 16)
    except (TypeError, ValueError):
        return False
    return True


def _masks(n_tokens: int, config: SignalConfig, key: str) -> np.ndarray:
    if config.kind == "pll":
        return pll_masks(n_tokens)
    return sample_masks(n_tokens, rate=config.mask_rate, num_masks=config.num_masks, seed=config.seed, key=key)


def keep_rows(cache: SignalCache | None, key: str | None, rows: dict, new: dict) -> None:
    """Store a chunk's ``new`` rows in ``cache`` (when given) and in ``rows``, then free the memory they used."""
    if cache is not None:
        cache.put_many(key, new)
    rows.update(new)
    release_free_memory()


def _energy(per_mask: Sequence[np.ndarray], flat: np.ndarray, config: SignalConfig) -> float:
    """Energy of one sample (nats) from the log-probs of its K masks.

    ``"sum"`` (Eq. 2): sum over masked positions, mean over masks (PLL: one token per mask,
    so the mean NLL per token). ``"mean"``: each mask's sum divided by its ``l`` masked
    tokens, then the mean over masks (appendix A.3.2's per-token reading).
    """
    k = len(per_mask)
    if config.kind == "energy" and config.energy_reduction == "mean":
        return -float(np.mean([np.sum(m, dtype=np.float64) / len(m) for m in per_mask]))
    return -float(np.sum(flat, dtype=np.float64)) / k


def masked_token_logprobs(lm: MaskedLM, ids: Sequence[np.ndarray], copies: Sequence[tuple[int, np.ndarray]], *,
                          token_budget: int | None = None, device=None, dtype: torch.dtype = torch.float32,
                          progress=None, stats: bool = False, buckets: bool | None = None,
                          kind: str = "energy") -> list[np.ndarray]:
    """Log-probabilities of the original tokens at the masked positions of each copy.

    With ``stats=True`` each position also gets Min-K%++'s ``mu`` and ``sigma``
    (the mean and standard deviation of ``log p`` under the model's own distribution
    there, :mod:`mlflow_mia.signals.token_stats`), reduced from the same logits in
    the same pass: no second forward pass, one more pair of sums over the vocabulary.

    Parameters
    ----------
    lm : MaskedLM
    ids : sequence of ndarray (int64)
        Token ids of each sample (special tokens included).
    copies : sequence of (sample_index, positions)
        ``positions`` (int64 array) are absolute positions into ``ids[sample_index]``
        replaced by the mask token in this copy.
    token_budget : int, optional
        Padded tokens per pass; default :func:`default_token_budget` of ``kind`` (on CUDA sized to its memory).
    progress : tqdm or None
        Updated by the number of copies done after each batch.
    stats : bool
        Also return ``mu`` and ``sigma`` of each position (default False).
    buckets : bool, optional
        Pad batches to length buckets (default on CUDA; :mod:`~mlflow_mia.signals.batching`).

    A batch that runs out of memory is halved and retried; the log-probs come back in one copy.

    Returns
    -------
    list of ndarray (float32), one per copy
        ``log p(s_i | s_{\\I})`` in nats for each masked position, in ``positions`` order:
        shape (n_positions,); with ``stats``, shape (n_positions, 4), columns
        ``log p``, ``mu``, ``sigma`` (nats) and ``top1`` (1.0 where the original token is
        the model's argmax there).
    """
    device = place_model(lm.model, resolve_device(device))  # a model placed by accelerate stays where it is
    token_budget = token_budget or default_token_budget(device, kind, model=lm.model, dtype=dtype,
                                                        vocab_logits=lm.split_head() is None)
    buckets = uses_length_buckets(device) if buckets is None else buckets
    width = (lambda n: bucket_width(n, lm.max_length)) if buckets else None
    mask_id = lm.tokenizer.mask_token_id
    lengths = np.array([len(ids[s]) for s, _ in copies], dtype=np.int64)
    out: list[np.ndarray | None] = [None] * len(copies)
    trimmer = HeapTrimmer()
    deferred = lm.has_projection()
    pending: list[tuple[np.ndarray, torch.Tensor, torch.Tensor]] = []  # (copies, features, targets) awaiting the head
    results = DeviceResults(device)  # each head's (or batch's) log-probs, copied to the host once at the end

    def run_head() -> None:
        features, targets = torch.cat([f for _, f, _ in pending]), torch.cat([t for _, _, t in pending])
        results.add([c for rows, _, _ in pending for c in rows],
                    lm.target_logprobs_of_features(features, targets, chunk_rows=HEAD_POSITIONS, stats=stats))
        pending.clear()

    def step(rows: np.ndarray) -> None:
        # the head waits for HEAD_POSITIONS masked positions (of several batches): its (positions x vocabulary)
        # products run faster on a few hundred rows; run first, so a step that runs out of memory keeps nothing
        if deferred and sum(len(t) for _, _, t in pending) >= HEAD_POSITIONS:
            run_head()
        longest = int(lengths[rows].max())
        batch, attention = pad_batch([ids[copies[c][0]] for c in rows], lm.tokenizer.pad_token_id,
                                     width(longest) if width else None)
        row_idx = np.concatenate([np.full(len(copies[c][1]), r, dtype=np.int64) for r, c in enumerate(rows)])
        col_idx = np.concatenate([copies[c][1] for c in rows])
        targets = to_device(batch[row_idx, col_idx], device)
        batch[row_idx, col_idx] = mask_id
        inputs = (to_device(batch, device), to_device(attention, device), to_device(row_idx, device),
                  to_device(col_idx, device))
        if deferred:
            most = max(len(copies[c][1]) for c in rows)  # known here: the device need not be asked
            pending.append((rows, lm.features_at(*inputs, max_per_row=most), targets))
        else:
            results.add(rows, lm.target_logprobs_at(*inputs, targets, stats=stats))
        if progress is not None:
            progress.update(len(rows))
        trimmer.after_batch(batch.shape)  # freed blocks of other shapes would pile up in the heap

    with torch.inference_mode(), autocast_for(dtype, device):
        run_batches(plan_batches(lengths, token_budget, width=width), lengths, step, width=width, device=device)
        if pending:
            run_head()
        for rows, logp in results.to_host():
            offset = 0
            for c in rows:
                n = len(copies[c][1])
                out[c] = logp[offset:offset + n]
                offset += n
    return out  # type: ignore[return-value]


def _row_keys(texts: list, mask_keys, text_key=None) -> tuple[list, dict]:
    """(one row hash per text, row hash -> the mask key its masks are drawn from).

    Without ``mask_keys`` a row is its text's sha256 and draws its own masks (empty
    map); with them, a row is the hash of (mask key, text) and draws the key's masks.
    With ``text_key`` each row hash is replaced by its keyed hash
    (:func:`mlflow_mia.hashing.keyed_hash`), and the map sends it to the unkeyed one, so
    the masks (and the values) do not depend on the key.
    """
    hashes, mask_of = _plain_row_keys(texts, mask_keys)
    if text_key is None:
        return hashes, mask_of
    keyed = [keyed_hash(h, text_key) for h in hashes]
    return keyed, {k: mask_of.get(h, h) for k, h in zip(keyed, hashes)}


def _plain_row_keys(texts: list, mask_keys) -> tuple[list, dict]:
    if mask_keys is None:
        return [text_hash(t) for t in texts], {}
    mask_keys = list(mask_keys)
    if len(mask_keys) != len(texts):
        raise ValueError(f"mask_keys has {len(mask_keys)} entries for {len(texts)} texts; give one per text")
    bad = next((k for k in mask_keys if not _is_hex(k)), None)
    if bad is not None:
        raise ValueError(f"mask_keys must be hex text hashes (mlflow_mia.data.text_hash(sample)), got {bad!r}")
    hashes = [text_hash(f"{k}\n{t}") for k, t in zip(mask_keys, texts)]
    return hashes, dict(zip(hashes, mask_keys))


def compute_signals(lm: MaskedLM, texts: Sequence[str], config: SignalConfig | None = None, *,
                    cache: SignalCache | None = None, device=None, progress: bool = True,
                    chunk_size: int = 512, desc: str | None = None,
                    mask_keys: Sequence[str] | None = None, text_key=None, stats: bool = True) -> SignalResult:
    """Masked energy (or PLL), masked-token log-probs and (optionally) their Min-K%++ statistics of every text.

    Parameters
    ----------
    lm : MaskedLM
        The model (target or reference) with its tokenizer.
    texts : sequence of str, length n_samples
    config : SignalConfig, optional
        ``kind``, ``num_masks`` (K), ``mask_rate``, ``seed``, ``max_length``,
        ``token_budget``, ``dtype``, ``energy_reduction`` (``"sum"``: Eq. 2;
        ``"mean"``: per masked token). Defaults: energy, K=10, 0.15, seed 0, sum.
    cache : SignalCache, optional
        Rows found there are not recomputed; new rows are written chunk by chunk.
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.
    progress : bool
        Show a tqdm progress bar over masked copies.
    chunk_size : int
        Samples per streamed chunk (memory and cache-commit granularity).
    mask_keys : sequence of str, optional
        One hex text hash per text (:func:`mlflow_mia.data.text_hash` of another
        text) from which its masks are drawn instead of its own sha256. The
        neighbourhood attack passes the source sample's hash for each neighbour,
        so a neighbour of the same token count is masked at the same positions as
        its sample and the mask-sampling noise cancels in the difference, as it
        does between target and reference in the likelihood ratio.
        Cached apart from the rows of plain texts.
    text_key : HashKey, bytes or str, optional
        A secret key under which the cache stores each row: ``HMAC-SHA256(key,
        sha256(text))`` (:func:`mlflow_mia.hashing.keyed_hash`, the keyed hash of the
        logged tables) instead of the text's bare sha256, so whoever reads the cache file
        cannot confirm a guessed text by hashing it (the canary audit keys its canaries
        and candidate secrets this way). Masks are still drawn from the text's sha256:
        the values are those of an unkeyed call. Cached apart from unkeyed rows; rows
        written under one key are found only under that key.
    stats : bool
        Also compute Min-K%++'s per-token ``mu`` and ``sigma`` (default True). An audit
        passes True only when one of its attacks declares ``token_stats``
        (:func:`mlflow_mia.attacks.required_token_quantities`): the vocabulary head is
        about 1.6x slower with them.

    Returns
    -------
    SignalResult
        Row-aligned with ``texts``; energies in nats (see :class:`SignalResult`); with
        ``stats``, ``token_mu`` and ``token_sigma`` (Min-K%++'s statistics) aligned with
        ``token_logprobs``, computed in the same forward passes (else both None).

    Notes
    -----
    Which per-token quantities a cached row holds is recorded in the row itself (its
    ``token_stats`` column is NULL when they were not computed; the row's MAC covers
    it), under the one spec key of the model and settings. A call without ``stats``
    reads any row; a call with ``stats`` recomputes the rows stored without them
    (by an audit that did not need them, or an mlflow-mia from before they existed;
    counted at INFO) and overwrites them with the superset. It recomputes rather than
    adding the missing part because the statistics are reduced from the same logits
    as the log-probs: adding them costs the whole encoder and head pass again, so the
    superset row costs nothing more, serves both kinds of call from one lookup and
    keeps one value per (model, text). Values and log-probs with and without
    ``stats`` are bitwise equal (:mod:`mlflow_mia.signals.token_stats`), so a row
    serves either call with the values a fresh call would compute.

    Raises
    ------
    ValueError
        A text has no maskable token; ``config.kind`` is neither ``"energy"`` nor ``"pll"``.

    References
    ----------
    Mireshghallah et al. (2022), Eq. 2 and appendix A.3.2.

    Examples
    --------
    >>> import torch; from transformers import BertConfig, BertForMaskedLM
    >>> from mlflow_mia.signals.testing import tiny_bert_tokenizer
    >>> tok = tiny_bert_tokenizer()
    >>> _ = torch.manual_seed(0)
    >>> model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
    ...                                    num_attention_heads=2, intermediate_size=32))
    >>> res = compute_signals(MaskedLM(model, tok), ["the cat sat on the mat"], progress=False)
    >>> res.values.shape, res.n_tokens.tolist(), bool(res.values[0] > 0)
    ((1,), [6], True)
    """
    config = config or SignalConfig()
    if config.kind not in MASKED_KINDS:
        raise ValueError(f"the masked energy computes signal='energy' or 'pll', got {config.kind!r}: a kind of its "
                         "own registers its function (mlflow_mia.signals.dispatch.compute_signals picks it)")
    texts = list(texts)
    if config.kind != "energy":
        mask_keys = None  # PLL masks every token once: nothing random to share
    hashes, mask_of = _row_keys(texts, mask_keys, text_key)
    settings = {**value_settings(lm, config), **dtype_setting(config.dtype, resolve_device(device))}
    max_length = settings["max_length"]
    spec = {"weights": lm.weights_id, "config": lm.config_id, "tokenizer_id": lm.tokenizer_id, **settings}
    if mask_keys is not None:
        spec["masks"] = "keyed"  # rows of (mask key, text), not of texts alone
    if text_key is not None:
        spec["rows"] = "hmac"  # rows named by a keyed hash, not by the text's sha256
    key = cache.register(spec) if cache is not None else None
    unique: dict[str, str] = dict(zip(hashes, texts))
    rows = cache.get_many(key, unique) if cache is not None else {}
    before_stats = [h for h, row in rows.items() if row[4] is None] if stats else []
    if before_stats:
        log.info("%s: %d cached text(s) were stored without the per-token statistics of Min-K%%++ (by an audit "
                 "that did not need them, or an older mlflow-mia) and are recomputed with them", lm.name,
                 len(before_stats))
        for h in before_stats:
            del rows[h]
    todo = [h for h in unique if h not in rows]
    if cache is not None:
        log.info("%s: %d of %d unique texts cached, %d to compute", lm.name, len(unique) - len(todo), len(unique),
                 len(todo))
    if todo:
        todo_texts = [unique[h] for h in todo]
        first_row: dict[str, int] = {}
        for i, h in enumerate(hashes):
            first_row.setdefault(h, i)
        ids, maskable, truncated = tokenize(lm, todo_texts, max_length=max_length,
                                            rows=[first_row[h] for h in todo])
        if truncated.any():
            log.warning("%d of %d texts are longer than %d tokens and are truncated to their first %d tokens",
                        int(truncated.sum()), len(todo_texts), max_length, max_length)
        masks = [_masks(len(m), config, mask_of.get(h, h)) for m, h in zip(maskable, todo)]
        order = np.argsort([len(x) for x in ids], kind="stable")
        total = sum(len(m) for m in masks)
        bar = progress_bar(total=total, desc=desc or f"{config.kind} {lm.name}", unit="mask", progress=progress,
                           leave=False)
        try:
            for start in range(0, len(order), chunk_size):
                chunk = order[start:start + chunk_size]
                copies = [(i, maskable[i][row]) for i in chunk for row in masks[i]]
                scored = masked_token_logprobs(lm, ids, copies, token_budget=config.token_budget, device=device,
                                               dtype=resolve_dtype(config.dtype, resolve_device(device)),
                                               progress=bar, stats=stats, kind=config.kind)
                new, offset = {}, 0
                for i in chunk:
                    k = len(masks[i])
                    per_mask = scored[offset:offset + k]  # (l,) each, or (l, 4) with stats: log p, mu, sigma, top1
                    offset += k
                    flat = np.concatenate(per_mask)
                    logprobs = np.ascontiguousarray(flat[:, 0] if stats else flat)
                    energy = _energy([m[:, 0] if stats else m for m in per_mask], logprobs, config)
                    new[todo[i]] = (energy, len(maskable[i]), bool(truncated[i]), logprobs,
                                    np.ascontiguousarray(flat[:, 1:].T) if stats else None)
                keep_rows(cache, key, rows, new)
        finally:
            bar.close()
    return result_from_rows(rows, hashes, config.kind, stats=stats)


register_signal_kind("energy", model="masked", unit="nats", compute=compute_signals)
register_signal_kind("pll", model="masked", unit="nats/token", compute=compute_signals)
