"""Neighbour texts from a generator masked LM.

Mattern et al. (2023), "Membership Inference Attacks against Language Models via
Neighbourhood Comparison", Findings of ACL, Sec. 2.2 and Algorithm 1: a neighbour
of a text replaces one word (or ``m`` words) by a substitute proposed by a masked
LM. The original token stays in the input; dropout ``p = 0.7`` hits the input
embedding of the replaced position only (Zhou et al. 2019), so the proposals keep
the meaning of the original word. The MLM distribution at that position is
renormalised over all tokens except the original::

    p_swap(w', w_i) = p(w' | x~_i) / (1 - p(w_i | x~_i))

and the ``n`` most likely swaps over all positions are kept (joint probability,
the product of ``p_swap``, for ``m > 1`` replacements at distinct positions).

How it is computed
------------------
* Which words are replaceable, which vocabulary tokens may replace them, and how
  the ``m``-word combinations are chosen and the neighbour texts rebuilt:
  :mod:`mlflow_mia.signals.neighbour_text`.
* One copy of the sample per replaceable word, none masked; in copy ``j`` a
  forward hook on the generator's word-embedding layer (before position and
  token-type embeddings are added) multiplies the embedding at word ``j``'s
  first piece by a Bernoulli(1 - p) mask scaled by ``1 / (1 - p)`` -- inverted
  dropout, drawn from a ``torch.Generator`` seeded by ``(seed, sha256(text))``
  and independent of batching. Copies of many samples are packed into forward
  passes of at most ``token_budget`` padded tokens (a sample's copies normally
  share one pass; never one pass per position); the LM head runs only at the
  perturbed positions.
* The GPU path (issue 45), as in :mod:`mlflow_mia.signals.energy`: the generator runs in
  the audit's compute type (``dtype``, bfloat16 by default on a CUDA device that supports
  it, :func:`~mlflow_mia.signals.runtime.autocast_for`) with ``p_swap``'s log-sum-exp over
  the vocabulary in float32; on CUDA the padded widths are length buckets and the token
  budget is sized to the device's memory; each batch's top substitutes stay on the device
  and a chunk's come back in one copy (:class:`~mlflow_mia.signals.runtime.DeviceResults`);
  a batch that runs out of memory is halved and retried
  (:func:`~mlflow_mia.signals.batching.run_batches`). On CPU in float32 the neighbours are
  those of one pass per batch, whatever the buckets or halving (tested).
Edge cases: a text with no replaceable word (or fewer than ``m``) gets no
neighbours, a warning gives the count and its neighbour value
(:mod:`mlflow_mia.signals.neighbour_recipe`) is NaN. When fewer than ``n`` substitutes exist, the text keeps the ones there
are (a warning gives the count), never crashing.

Notes
-----
Departures from the paper: the paper's target is a causal LM (GPT-2) and its
loss the score; here the target is itself a masked LM and its masked energy (or
PLL, per :class:`~mlflow_mia.config.SignalConfig`) is the loss. The paper uses
BERT-base as generator with ``n = 100``; here any masked LM (by default the
reference model) and ``n = 25``. The paper replaces tokens; here whole words.

Neighbours are cached next to the signal cache (``neighbours.sqlite``) as
edits -- character spans and substitute vocabulary words, never raw text --
keyed by the generator, its tokenizer, the neighbourhood settings, the seed and the
compute type (:func:`~mlflow_mia.signals.runtime.dtype_setting`: bfloat16 neighbours are
never read for float32 ones; float32 keeps the key of caches written before it).
Their values under the target go through
:func:`~mlflow_mia.signals.energy.compute_signals` and its cache like every other
text's, in :class:`~mlflow_mia.signals.neighbour_recipe.NeighbourRecipe`: the one
recipe (generator + settings -> neighbours -> values) every consumer calls.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from mlflow_mia.progress import bar as progress_bar

from mlflow_mia.config import NeighbourhoodConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals.batching import bucket_width, pad_batch, plan_batches, run_batches
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.model import MaskedLM, as_masked_lm
from mlflow_mia.signals.neighbour_store import NeighbourStore
from mlflow_mia.signals.neighbour_text import (SLACK, Swap, Word, keep_substitutes, neighbour_edits, rebuild,
                                               replaceable_words, vocab_tables)
from mlflow_mia.signals.runtime import (NEIGHBOUR_TOKEN_BUDGET, DeviceResults, autocast_for, default_token_budget,
                                        dtype_setting, resolve_device, resolve_dtype, to_device, token_limit,
                                        uses_length_buckets)
from mlflow_mia.signals.placement import place_model

__all__ = ["generate_neighbours", "candidate_swaps", "choose_generator", "HOW_TO_GIVE_A_GENERATOR",
           "replaceable_words"]

log = logging.getLogger(__name__)

_CACHE_VERSION = 1


# --------------------------------------------------------------------------- generator


def load_generator(generator, *, role: str = "neighbour generator") -> MaskedLM:
    """A :class:`MaskedLM` from a MaskedLM, a ``(model, tokenizer)`` pair or a local folder.

    Raises
    ------
    ValueError
        The model has no masked-LM head, or (for a folder) its head weights are
        missing from the checkpoint (e.g. a sentence encoder saved without one),
        or the tokenizer is not a fast tokenizer (word offsets are needed).
    TypeError
        ``generator`` is of another type.
    """
    try:
        lm = as_masked_lm(generator, role=role)
    except ValueError as exc:
        raise ValueError(f"the {role} must be a masked LM with a trained head: {exc}") from None
    if not getattr(lm.tokenizer, "is_fast", False):
        raise ValueError(f"the {role}'s tokenizer {type(lm.tokenizer).__name__} is not a fast tokenizer; "
                         "word offsets (word_ids, offset_mapping) are needed to replace whole words")
    if lm.model.get_input_embeddings() is None:
        raise ValueError(f"the {role} {type(lm.model).__name__} exposes no input embeddings")
    return lm


def _dropout_scales(n_positions: int, hidden: int, p: float, seed: int, key: str) -> torch.Tensor:
    """Inverted-dropout multipliers of shape (n_positions, hidden), drawn from ``(seed, key)`` alone."""
    state = np.random.SeedSequence([int(seed), int(key, 16)]).generate_state(2, dtype=np.uint32)
    g = torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))
    keep = torch.rand((n_positions, hidden), generator=g) >= p
    return keep.to(torch.float32) / (1.0 - p)


class _EmbeddingDropout:
    """Forward hook on the word-embedding layer: scales the rows ``(rows, cols)`` by ``scale``."""

    def __init__(self):
        self.rows = self.cols = self.scale = None

    def __call__(self, module, inputs, output):
        if self.rows is None:
            return output
        return output.index_put((self.rows, self.cols), output[self.rows, self.cols] * self.scale.to(output.dtype))


@dataclass
class _Tables:
    """What the candidate filter needs from the generator's vocabulary, computed once per call."""

    allowed: torch.Tensor
    surfaces: list
    uncased: bool
    hidden: int


def _tables(lm: MaskedLM, device) -> _Tables:
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    allowed, surfaces, uncased = vocab_tables(lm.tokenizer, vocab)
    return _Tables(allowed=torch.from_numpy(allowed).to(device), surfaces=surfaces, uncased=uncased,
                   hidden=lm.model.get_input_embeddings().weight.shape[1])


def compute_type(dtype, device) -> tuple[torch.dtype, dict]:
    """The generator's compute type and cache-key part: ``resolve_dtype`` and ``dtype_setting`` on ``device``.

    ``dtype``: a :attr:`~mlflow_mia.config.SignalConfig.dtype` name (None is ``"auto"``) or a
    ``torch.dtype``. Raises ValueError for another type (``torch.float64``, ``"float8"``),
    naming the ones accepted (:func:`~mlflow_mia.signals.runtime.resolve_dtype`).

    >>> compute_type(None, "cpu"), compute_type(torch.bfloat16, "cpu")
    ((torch.float32, {}), (torch.bfloat16, {'dtype': 'bfloat16'}))
    """
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype
    return resolve_dtype(name, device), dtype_setting(name, device)


def candidate_swaps(generator: MaskedLM, texts: Sequence[str], *, top_k: int, dropout: float = 0.7, seed: int = 0,
                    max_length: int | None = None, token_budget: int | None = None, device=None,
                    dtype="auto", buckets: bool | None = None,
                    progress: bool = True) -> tuple[list[list[Word]], list[list[list[Swap]]]]:
    """The ``top_k`` most likely substitutes of every replaceable word of every text.

    Parameters
    ----------
    generator : MaskedLM
        The masked LM proposing substitutes (fast tokenizer).
    texts : sequence of str, length n_texts
        Held in memory together with one ``(n_words, hidden)`` dropout mask per
        text: pass chunks of a few hundred texts (as :func:`generate_neighbours` does).
    top_k : int
        Substitutes kept per word.
    dropout : float
        p of the dropout applied to the word embedding at the replaced position only.
    seed : int
        Dropout masks come from ``(seed, sha256(text))``.
    max_length : int, optional
        Token limit of the generator (default: its own).
    token_budget : int, optional
        Padded tokens per forward pass (default: ``NEIGHBOUR_TOKEN_BUDGET`` on CPU, sized
        to the device's memory on CUDA, :func:`~mlflow_mia.signals.runtime.default_token_budget`).
    dtype : str or torch.dtype
        Compute type of the generator's products (:func:`compute_type`; ``"auto"``:
        bfloat16 on a CUDA device that supports it, else float32). ``p_swap`` is
        normalised in float32 either way.
    buckets : bool, optional
        Pad batches to length buckets (default: on CUDA; :func:`~mlflow_mia.signals.batching.bucket_width`).

    Returns
    -------
    words : list (n_texts) of list of Word
    swaps : list (n_texts) of list (n_words) of list of Swap
        For each word, up to ``top_k`` substitutes by descending ``logprob``.

    Raises
    ------
    MemoryError
        One copy alone does not fit in the device's memory (a larger batch is halved and retried).
    """
    lm = load_generator(generator)
    device = resolve_device(device)
    tables = _tables(lm, device)
    bar = progress_bar(total=0, desc=f"neighbours from {lm.name}", unit="word", progress=progress, leave=False)
    try:
        return _candidate_swaps(lm, tables, list(texts), top_k=top_k, dropout=dropout, seed=seed,
                                max_length=token_limit(max_length, lm.max_length), token_budget=token_budget,
                                device=device, bar=bar, dtype=compute_type(dtype, device)[0], buckets=buckets)
    finally:
        bar.close()


def _top_swaps(logits: torch.Tensor, original: torch.Tensor, allowed: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` best ``log p_swap`` of each row and their token ids, packed in one int32 tensor of shape (rows, 2k).

    ``p_swap`` renormalises the MLM distribution over every token but the original
    (Mattern et al. 2023, Sec. 2.2), in float32 whatever the model's type; tokens that
    may not replace a word get ``-inf``. Columns ``:k`` hold the float32 log-probs' bits
    (``view``), ``k:`` the ids: one tensor, so a chunk's results come back in one copy.
    """
    logp = logits.float()  # the same tensor when the head gave float32: changed in place below, as it is ours
    logp[torch.arange(len(logp), device=logp.device), original] = float("-inf")
    logp -= torch.logsumexp(logp, dim=-1, keepdim=True)
    logp.masked_fill_(~allowed[None, :], float("-inf"))
    top_lp, top_id = torch.topk(logp, k, dim=-1, sorted=True)
    return torch.cat([top_lp.view(torch.int32), top_id.to(torch.int32)], dim=1)


def _generator_budget(token_budget, device, model, dtype) -> int:
    """The given budget, else the measured CPU one, else (CUDA) one sized to the device's free memory.

    Each copy holds a full row of float32 logits (``vocab_logits``).
    """
    return token_budget or default_token_budget(device, "neighbours", model=model, dtype=dtype, vocab_logits=True,
                                                table={"cpu": NEIGHBOUR_TOKEN_BUDGET})


def _candidate_swaps(lm: MaskedLM, tables: _Tables, texts: list[str], *, top_k, dropout, seed, max_length,
                     token_budget, device, bar, dtype=torch.float32, buckets=None):
    tok = lm.tokenizer
    ids, words = replaceable_words(tok, texts, max_length=max_length)
    device = place_model(lm.model, device)  # a model placed by accelerate stays where it is
    model = lm.model
    token_budget = _generator_budget(token_budget, device, model, dtype)
    buckets = uses_length_buckets(device) if buckets is None else buckets
    width = (lambda n: bucket_width(n, lm.max_length)) if buckets else None
    copies = [(i, j) for i in range(len(texts)) for j in range(len(words[i]))]
    if bar is not None and bar.total is not None:
        bar.total += len(copies)
        bar.refresh()
    scales = {}
    swaps: list[list[list[Swap]]] = [[[] for _ in w] for w in words]
    lengths = np.array([len(ids[i]) for i, _ in copies], dtype=np.int64)
    k = min(top_k + 4, int(tables.allowed.shape[0]))  # a few spare for substitutes equal to the original word
    results = DeviceResults(device)  # each batch's top substitutes, copied to the host once for the chunk
    hook = _EmbeddingDropout()

    def step(rows: np.ndarray) -> None:
        longest = int(lengths[rows].max())
        batch, attention = pad_batch([ids[copies[c][0]] for c in rows], tok.pad_token_id,
                                     width(longest) if width else None)
        cols = np.array([words[copies[c][0]][copies[c][1]].position for c in rows], dtype=np.int64)
        for c in rows:
            i = copies[c][0]
            if i not in scales:
                scales[i] = _dropout_scales(len(words[i]), tables.hidden, dropout, seed, text_hash(texts[i]))
        scale = torch.stack([scales[copies[c][0]][copies[c][1]] for c in rows]).numpy()
        r_t, c_t = to_device(np.arange(len(rows), dtype=np.int64), device), to_device(cols, device)
        original = to_device(batch[np.arange(len(rows)), cols], device)
        hook.rows, hook.cols, hook.scale = r_t, c_t, to_device(scale, device)
        try:
            logits = lm.logits_at(to_device(batch, device), to_device(attention, device), r_t, c_t)
        finally:
            hook.rows = None
        results.add(rows, _top_swaps(logits, original, tables.allowed, k))  # last: a step that fails keeps nothing
        if bar is not None:
            bar.update(len(rows))

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        with torch.inference_mode(), autocast_for(dtype, device):
            run_batches(plan_batches(lengths, token_budget, width=width), lengths, step, width=width, device=device)
            back = results.to_host()
    finally:
        handle.remove()
    for rows, packed in back:
        top_lp, top_id = np.ascontiguousarray(packed[:, :k]).view(np.float32), packed[:, k:]
        for r, c in enumerate(rows):
            i, j = copies[c]
            word = words[i][j]
            swaps[i][j] = keep_substitutes(j, texts[i][word.start:word.end], top_lp[r], top_id[r],
                                           surfaces=tables.surfaces, uncased=tables.uncased, top_k=top_k)
    return words, swaps


def generate_neighbours(generator, texts: Sequence[str], *, config: NeighbourhoodConfig | None = None, seed: int = 0,
                        device=None, progress: bool = True, cache: SignalCache | None = None,
                        max_length: int | None = None, token_budget: int | None = None, dtype="auto",
                        chunk_size: int = 256) -> list[list[str]]:
    """Neighbour texts of each text: its ``n`` most likely ``m``-word replacements.

    Parameters
    ----------
    generator : MaskedLM, (model, tokenizer) or str
        The masked LM proposing substitutes (a local folder for a str); needs a
        trained MLM head and a fast tokenizer.
    texts : sequence of str, length n_texts
    config : NeighbourhoodConfig, optional
        ``num_neighbours`` (n), ``num_replacements`` (m), ``dropout`` (p).
    seed : int
        Dropout masks come from ``(seed, sha256(text))``: same seed, same neighbours,
        whatever the batching.
    cache : SignalCache, optional
        Neighbours are cached beside it (``neighbours.sqlite``) as edits, not texts.
    max_length : int, optional
        Generator token limit (default: the model's).
    token_budget : int, optional
        Padded tokens per forward pass of the generator (default ``NEIGHBOUR_TOKEN_BUDGET``
        on CPU, sized to the device's memory on CUDA).
    dtype : str or torch.dtype
        Compute type of the generator (:func:`compute_type`; ``"auto"``: bfloat16 on a CUDA
        device that supports it, else float32), part of the cache key when not float32.
    chunk_size : int
        Texts per chunk: memory, cache-commit and host-copy granularity.

    Returns
    -------
    list (n_texts) of list of str
        Up to ``n`` distinct neighbours per text, by descending joint ``p_swap``;
        each differs from its text in exactly ``m`` words. Empty for a text with
        fewer than ``m`` replaceable words; shorter than ``n`` when fewer
        substitutes exist (both logged as warnings with counts).

    Raises
    ------
    ValueError
        The generator has no (trained) MLM head or no fast tokenizer; ``dtype`` is not a compute type.
    MemoryError
        One copy alone does not fit in the device's memory.

    References
    ----------
    Mattern et al. (2023), Sec. 2.2, Algorithm 1.

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_bert
    >>> model, tok = tiny_bert(seed=0)
    >>> nb = generate_neighbours((model, tok), ["the cat sat on the mat ."],
    ...                          config=NeighbourhoodConfig(num_neighbours=3), progress=False)
    >>> len(nb[0]), all(len(x.split()) == 7 and x != "the cat sat on the mat ." for x in nb[0])
    (3, True)
    """
    config = config or NeighbourhoodConfig()
    lm = load_generator(generator)
    texts = list(texts)
    n, m = config.num_neighbours, config.num_replacements
    limit = token_limit(max_length, lm.max_length)
    device = resolve_device(device)
    compute, dtype_key = compute_type(dtype, device)
    hashes = [text_hash(t) for t in texts]
    unique = dict(zip(hashes, texts))
    store = key = None
    found: dict = {}
    if cache is not None:
        store = NeighbourStore(cache)
        spec = {"kind": "neighbours", "version": _CACHE_VERSION, "generator_weights": lm.weights_id,
                "generator_config": lm.config_id, "generator_tokenizer_id": lm.tokenizer_id, "num_neighbours": n,
                "num_replacements": m,
                "dropout": float(config.dropout), "seed": int(seed), "max_length": limit, **dtype_key}
        key = store.register(spec)
        found = store.get_many(key, unique)
    todo = [h for h in unique if h not in found]
    if cache is not None:
        log.info("neighbours from %s: %d of %d unique texts cached, %d to compute", lm.name, len(unique) - len(todo),
                 len(unique), len(todo))

    bar = progress_bar(total=0, desc=f"neighbours from {lm.name}", unit="word", progress=progress and bool(todo),
                       leave=False)
    try:
        if todo:
            tables = _tables(lm, device)
            for start in range(0, len(todo), chunk_size):
                chunk = todo[start:start + chunk_size]
                chunk_texts = [unique[h] for h in chunk]
                words, swaps = _candidate_swaps(lm, tables, chunk_texts, top_k=n + SLACK, dropout=config.dropout,
                                                seed=seed, max_length=limit, token_budget=token_budget,
                                                device=device, bar=bar, dtype=compute)
                new = {h: neighbour_edits(text, w, sw, n=n, m=m)
                       for h, text, w, sw in zip(chunk, chunk_texts, words, swaps)}
                if store is not None:
                    store.put_many(key, new)
                found.update(new)
    finally:
        bar.close()
        if store is not None:
            store.close()
    out = [[rebuild(t, e) for e in found[h]] for t, h in zip(texts, hashes)]
    none = sum(1 for x in out if not x)
    short = sum(1 for x in out if 0 < len(x) < n)
    if none:
        log.warning("%d of %d text(s) have %s replaceable word(s) under the generator tokenizer: no neighbours",
                    none, len(texts), "no" if m == 1 else f"fewer than {m}")
    if short:
        log.warning("%d of %d text(s) have fewer than %d possible neighbours and keep the ones there are",
                    short, len(texts), n)
    return out


def choose_generator(generator=None, *, configured: str | None = None, reference=None):
    """The masked LM that proposes neighbours: the one rule of precedence.

    An explicitly given ``generator`` wins, then the ``configured`` model
    (``NeighbourhoodConfig.generator_model``: a local folder, or a URI the
    integrations resolve), then the ``reference`` model.

    Returns
    -------
    MaskedLM, (model, tokenizer), str or None
        None when none of the three is given.

    >>> choose_generator("g", configured="c", reference="r"), choose_generator(configured="c", reference="r")
    ('g', 'c')
    >>> choose_generator(reference="r"), choose_generator()
    ('r', None)
    """
    if generator is not None:
        return generator
    if configured:
        return configured
    return reference


#: How to give the neighbourhood attack a generator (the end of every error about a missing one).
HOW_TO_GIVE_A_GENERATOR = ("pass generator=... or references=[...], or set neighbourhood.generator_model to a local "
                           "model folder, e.g. AuditConfig(neighbourhood={'generator_model': '/path/to/bert'})")
