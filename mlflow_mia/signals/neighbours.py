"""Neighbour texts from a generator masked LM, and their energies under the target.

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
* Words are the generator tokenizer's words (``word_ids()`` of a fast
  tokenizer). A word is replaceable when it is alphabetic and is a whole
  whitespace-delimited word once leading and trailing punctuation are stripped:
  ``fall`` in ``"fall,"`` is replaceable; ``don`` in ``"don't"``, ``S`` in
  ``"S&P"``, digits, punctuation and special tokens are not.
* A word of several word-pieces is perturbed and read at its **first piece**;
  it is replaced as a whole (its character span) by one vocabulary token that is
  a whole word: alphabetic once decoded, not a special token, and a word start
  (WordPiece: no ``##`` continuation; byte-level BPE / SentencePiece: carrying
  the ``Ġ`` / ``▁`` marker, even for a text's first word, whose own piece has
  none -- so first words are proposed only marker tokens, which a BPE model
  rates low there). The original token and substitutes equal to the original
  word (case-insensitively) are excluded.
* With an uncased generator (``"Abc"`` and ``"abc"`` tokenize alike) the
  substitute takes the original word's case pattern (``Stocks`` -> ``Shares``,
  ``IBM`` -> ``HSBC``). The neighbour text is the original with the word's
  character span replaced, so spacing and punctuation stay; the target
  tokenizer re-tokenises it.
* One copy of the sample per replaceable word, none masked; in copy ``j`` a
  forward hook on the generator's word-embedding layer (before position and
  token-type embeddings are added) multiplies the embedding at word ``j``'s
  first piece by a Bernoulli(1 - p) mask scaled by ``1 / (1 - p)`` -- inverted
  dropout, drawn from a ``torch.Generator`` seeded by ``(seed, sha256(text))``
  and independent of batching. Copies of many samples are packed into forward
  passes of at most ``token_budget`` padded tokens (a sample's copies normally
  share one pass; never one pass per position); the LM head runs only at the
  perturbed positions.
* ``m > 1`` replacements: the exact ``n`` best combinations of ``m`` swaps at
  distinct words by joint log-probability (Algorithm 1), found by a dynamic
  programme over words that keeps the best partial combinations per number of
  swaps. Each word's candidates are its top ``n`` substitutes, which cannot
  exclude a member of the overall top ``n``.
* Ties are broken by word order, then by substitute rank; identical neighbour
  texts are kept once and the original text is never its own neighbour.

Edge cases: a text with no replaceable word (or fewer than ``m``) gets no
neighbours, a warning gives the count and :func:`neighbour_energies` returns NaN
for it. When fewer than ``n`` substitutes exist, the text keeps the ones there
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
keyed by the generator, its tokenizer, the neighbourhood settings and the seed.
Their energies go through :func:`~mlflow_mia.signals.energy.compute_signals`
and its cache like every other text's.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from mlflow_mia.config import AuditConfig, NeighbourhoodConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals.batching import pad_batch, plan_batches
from mlflow_mia.signals.cache import SignalCache, SqliteSpecStore
from mlflow_mia.signals.energy import compute_signals, resolve_device
from mlflow_mia.signals.model import MaskedLM, as_masked_lm

__all__ = ["generate_neighbours", "neighbour_energies", "candidate_swaps", "load_generator", "Swap", "Word",
           "replaceable_words"]

log = logging.getLogger(__name__)

_BOUNDARY_MARKERS = ("Ġ", "▁")  # byte-level BPE (RoBERTa, GPT-2) and SentencePiece word-start markers
_CACHE_VERSION = 1
_SLACK = 8  # extra candidates kept so that dropping duplicate neighbour texts still leaves n
# Padded tokens per generator pass when none is given. Each copy needs the full
# vocabulary at one position, so the head's matrix product has one row per copy:
# larger batches than the energy's CPU default keep it efficient
# (benchmarks/bench_neighbours.py was measured with this value).
NEIGHBOUR_TOKEN_BUDGET = 4096


@dataclass(frozen=True)
class Word:
    """A replaceable word of one text, under the generator tokenizer.

    Attributes
    ----------
    position : int
        Token position (into the text's ids, special tokens included) of its first piece.
    token_id : int
        Id of the first piece: the token perturbed, and excluded as a substitute.
    start, end : int
        Character span of the whole word in the text.
    """

    position: int
    token_id: int
    start: int
    end: int


@dataclass(frozen=True)
class Swap:
    """One candidate single-word replacement.

    Attributes
    ----------
    word : int
        Index into the text's replaceable words.
    token_id : int
        Substitute token id (generator vocabulary).
    replacement : str
        Surface form written into the text (case adapted for uncased generators).
    logprob : float
        ``log p_swap`` in nats: the MLM log-probability renormalised over all
        tokens but the original.
    """

    word: int
    token_id: int
    replacement: str
    logprob: float


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


def _vocab_tables(tokenizer, size: int) -> tuple[np.ndarray, list[str], bool]:
    """Which ids may substitute a word, their surface forms, and whether the tokenizer is uncased.

    A substitute is a whole word: not special, alphabetic once decoded, and a
    word start -- WordPiece: no continuation prefix (``##``); vocabularies with a
    word-boundary marker (byte-level BPE ``Ġ``, SentencePiece ``▁``): carrying it;
    other vocabularies (word level): every token.
    """
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    prefix = getattr(tokenizer.backend_tokenizer.model, "continuing_subword_prefix", None) or None
    marked = prefix is None and any(t is not None and t.startswith(_BOUNDARY_MARKERS) for t in tokens)
    decoder = tokenizer.backend_tokenizer.decoder
    special = set(tokenizer.all_special_ids)
    allowed = np.zeros(size, dtype=bool)
    surfaces = [""] * size
    for i, tok in enumerate(tokens[:size]):
        if tok is None or i in special:
            continue
        if prefix is not None:
            word_start = not tok.startswith(prefix)
        else:
            word_start = tok.startswith(_BOUNDARY_MARKERS) if marked else True
        surface = (decoder.decode([tok]) if decoder is not None else tok).strip()
        surfaces[i] = surface
        allowed[i] = word_start and surface.isalpha()
    uncased = tokenizer.tokenize("Abc XyZ") == tokenizer.tokenize("abc xyz")
    return allowed, surfaces, uncased


def _match_case(word: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return word.upper()
    if original[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _core_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The whitespace-delimited chunk around ``[start, end)`` without leading/trailing punctuation."""
    lo, hi = start, end
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    while lo < hi and not text[lo].isalnum():
        lo += 1
    while hi > lo and not text[hi - 1].isalnum():
        hi -= 1
    return lo, hi


def replaceable_words(tokenizer, texts: Sequence[str], *, max_length: int) -> tuple[list[np.ndarray], list[list[Word]]]:
    """Token ids and replaceable words of each text under the generator tokenizer.

    Parameters
    ----------
    tokenizer : fast tokenizer of the generator
    texts : sequence of str, length n_texts
    max_length : int
        Token limit, special tokens included; longer texts are truncated and a
        word cut by the limit is not replaceable.

    Returns
    -------
    ids : list of ndarray (int64)
        Token ids of each (possibly truncated) text.
    words : list of list of Word
        Replaceable words of each text, in text order (see the module notes).
    """
    # Special-token strings typed in a text are text (as in energy.tokenize), never special ids.
    full = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length,
                     return_offsets_mapping=True, return_special_tokens_mask=True, verbose=False,
                     split_special_tokens=True)
    ids_out, words_out = [], []
    for i, text in enumerate(texts):
        ids = np.asarray(full["input_ids"][i], dtype=np.int64)
        offsets = full["offset_mapping"][i]
        special = full["special_tokens_mask"][i]
        word_ids = full.word_ids(i)
        pieces: dict[int, list[int]] = {}
        for pos, w in enumerate(word_ids):
            if w is not None and not special[pos]:
                pieces.setdefault(w, []).append(pos)
        words = []
        for w, positions in pieces.items():
            first, last = positions[0], positions[-1]
            # A word cut by truncation fails the whole-word test below (its chunk is longer).
            start, end = offsets[first][0], offsets[last][1]
            while start < end and text[start].isspace():
                start += 1
            if start >= end:
                continue
            if not text[start:end].isalpha() or _core_span(text, start, end) != (start, end):
                continue
            words.append(Word(position=first, token_id=int(ids[first]), start=start, end=end))
        ids_out.append(ids)
        words_out.append(words)
    return ids_out, words_out


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
    allowed, surfaces, uncased = _vocab_tables(lm.tokenizer, vocab)
    return _Tables(allowed=torch.from_numpy(allowed).to(device), surfaces=surfaces, uncased=uncased, hidden=lm.model.get_input_embeddings().weight.shape[1])


def candidate_swaps(generator: MaskedLM, texts: Sequence[str], *, top_k: int, dropout: float = 0.7, seed: int = 0,
                    max_length: int | None = None, token_budget: int | None = None, device=None,
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
        Padded tokens per forward pass (default ``NEIGHBOUR_TOKEN_BUDGET``).

    Returns
    -------
    words : list (n_texts) of list of Word
    swaps : list (n_texts) of list (n_words) of list of Swap
        For each word, up to ``top_k`` substitutes by descending ``logprob``.
    """
    from tqdm.auto import tqdm

    lm = load_generator(generator)
    device = resolve_device(device)
    tables = _tables(lm, device)
    bar = tqdm(total=0, desc=f"neighbours from {lm.name}", unit="word", disable=not progress, leave=False)
    try:
        return _candidate_swaps(lm, tables, list(texts), top_k=top_k, dropout=dropout, seed=seed,
                                max_length=min(max_length or lm.max_length, lm.max_length),
                                token_budget=token_budget, device=device, bar=bar)
    finally:
        bar.close()


def _candidate_swaps(lm: MaskedLM, tables: _Tables, texts: list[str], *, top_k, dropout, seed, max_length,
                     token_budget, device, bar):
    token_budget = token_budget or NEIGHBOUR_TOKEN_BUDGET
    tok = lm.tokenizer
    ids, words = replaceable_words(tok, texts, max_length=max_length)
    model = lm.model.to(device)
    copies = [(i, j) for i in range(len(texts)) for j in range(len(words[i]))]
    if bar is not None and bar.total is not None:
        bar.total += len(copies)
        bar.refresh()
    scales = {}
    swaps: list[list[list[Swap]]] = [[[] for _ in w] for w in words]
    lengths = np.array([len(ids[i]) for i, _ in copies], dtype=np.int64)
    hook = _EmbeddingDropout()
    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        with torch.inference_mode():
            for rows in plan_batches(lengths, token_budget):
                batch, attention = pad_batch([ids[copies[c][0]] for c in rows], tok.pad_token_id)
                cols, scale_rows = [], []
                for c in rows:
                    i, j = copies[c]
                    cols.append(words[i][j].position)
                    if i not in scales:
                        scales[i] = _dropout_scales(len(words[i]), tables.hidden, dropout, seed, text_hash(texts[i]))
                    scale_rows.append(scales[i][j])
                r_t = torch.arange(len(rows), device=device)
                c_t = torch.tensor(cols, dtype=torch.long, device=device)
                hook.rows, hook.cols, hook.scale = r_t, c_t, torch.stack(scale_rows).to(device)
                input_ids = torch.from_numpy(batch).to(device)
                try:
                    logits = lm.logits_at(input_ids, torch.from_numpy(attention).to(device), r_t, c_t)
                finally:
                    hook.rows = None
                logits = logits.float()
                original = input_ids[r_t, c_t]
                # p_swap: renormalise over every token but the original (Mattern et al. 2023, Sec. 2.2).
                logits[r_t, original] = float("-inf")
                logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
                logp = logp.masked_fill(~tables.allowed[None, :], float("-inf"))
                k = min(top_k + 4, logp.shape[1])  # a few spare for substitutes equal to the original word
                top_lp, top_id = torch.topk(logp, k, dim=-1, sorted=True)
                top_lp, top_id = top_lp.cpu().numpy(), top_id.cpu().numpy()
                for r, c in enumerate(rows):
                    i, j = copies[c]
                    word = words[i][j]
                    original_word = texts[i][word.start:word.end]
                    kept = []
                    for lp, t in zip(top_lp[r], top_id[r]):
                        if not np.isfinite(lp) or len(kept) == top_k:
                            break
                        surface = tables.surfaces[t]
                        if surface.lower() == original_word.lower():
                            continue
                        if tables.uncased:
                            surface = _match_case(surface, original_word)
                        kept.append(Swap(word=j, token_id=int(t), replacement=surface, logprob=float(lp)))
                    swaps[i][j] = kept
                if bar is not None:
                    bar.update(len(rows))
    finally:
        handle.remove()
    return words, swaps


def _best_combinations(swaps: list[list[Swap]], *, n: int, m: int) -> list[tuple[float, tuple[Swap, ...]]]:
    """The ``n`` best combinations of ``m`` swaps at distinct words, by summed log-probability.

    Exact: a dynamic programme over words keeping the ``n`` best partial
    combinations per number of swaps (a prefix outside its state's top ``n`` cannot
    extend to a combination in the overall top ``n``). Ties: word order, then rank.
    """
    def key(item):
        score, combo = item
        return (-score, [(s.word, r) for s, r in combo])

    states: list[list] = [[(0.0, ())]] + [[] for _ in range(m)]
    for cands in swaps:
        if not cands:
            continue
        for s in range(m, 0, -1):
            extended = [(score + sw.logprob, combo + ((sw, r),)) for score, combo in states[s - 1]
                        for r, sw in enumerate(cands)]
            states[s] = heapq.nsmallest(n, states[s] + extended, key=key)
    return [(score, tuple(sw for sw, _ in combo)) for score, combo in states[m]]


def _edits(words: list[Word], combo) -> tuple[tuple[int, int, str], ...]:
    return tuple(sorted((words[sw.word].start, words[sw.word].end, sw.replacement) for sw in combo))


def _neighbour_edits(text: str, words: list[Word], swaps: list[list[Swap]], *, n: int, m: int) -> list:
    """Edits of the ``n`` best distinct neighbours of one text (none equal to the text)."""
    edits, seen = [], {text}
    for _, combo in _best_combinations(swaps, n=n + _SLACK, m=m):
        e = _edits(words, combo)
        nb = _rebuild(text, e)
        if nb not in seen:
            seen.add(nb)
            edits.append(e)
        if len(edits) == n:
            break
    return edits


def _rebuild(text: str, edits) -> str:
    for start, end, word in sorted(edits, reverse=True):
        text = text[:start] + word + text[end:]
    return text


class _NeighbourStore(SqliteSpecStore):
    """Neighbour edits cached beside a :class:`SignalCache` (``neighbours.sqlite``): spans and vocabulary words only."""

    table = "neighbour_rows"
    columns = ("edits TEXT",)

    def __init__(self, cache: SignalCache):
        super().__init__(os.path.join(os.path.dirname(os.path.abspath(cache.path)), "neighbours.sqlite"))

    def get_many(self, key: str, hashes) -> dict:
        return {h: [tuple(tuple(e) for e in nb) for nb in json.loads(edits)]
                for h, (edits,) in self.get_rows(key, hashes).items()}

    def put_many(self, key: str, rows: dict) -> None:
        self.put_rows(key, {h: (json.dumps(edits),) for h, edits in rows.items()})


def generate_neighbours(generator, texts: Sequence[str], *, config: NeighbourhoodConfig | None = None, seed: int = 0,
                        device=None, progress: bool = True, cache: SignalCache | None = None,
                        max_length: int | None = None, token_budget: int | None = None,
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
        Padded tokens per forward pass of the generator (default ``NEIGHBOUR_TOKEN_BUDGET``).
    chunk_size : int
        Texts per chunk: memory and cache-commit granularity.

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
        The generator has no (trained) MLM head or no fast tokenizer.

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
    limit = min(max_length or lm.max_length, lm.max_length)
    hashes = [text_hash(t) for t in texts]
    unique = dict(zip(hashes, texts))
    store = key = None
    found: dict = {}
    if cache is not None:
        store = _NeighbourStore(cache)
        spec = {"kind": "neighbours", "version": _CACHE_VERSION, "generator_weights": lm.weights_id,
                "generator_tokenizer_id": lm.tokenizer_id, "num_neighbours": n, "num_replacements": m,
                "dropout": float(config.dropout), "seed": int(seed), "max_length": limit}
        key = store.register(spec)
        found = store.get_many(key, unique)
    todo = [h for h in unique if h not in found]
    if cache is not None:
        log.info("neighbours from %s: %d of %d unique texts cached, %d to compute", lm.name, len(unique) - len(todo),
                 len(unique), len(todo))
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=f"neighbours from {lm.name}", unit="word", disable=not progress or not todo,
               leave=False)
    try:
        if todo:
            device = resolve_device(device)
            tables = _tables(lm, device)
            for start in range(0, len(todo), chunk_size):
                chunk = todo[start:start + chunk_size]
                chunk_texts = [unique[h] for h in chunk]
                words, swaps = _candidate_swaps(lm, tables, chunk_texts, top_k=n + _SLACK, dropout=config.dropout,
                                                seed=seed, max_length=limit, token_budget=token_budget,
                                                device=device, bar=bar)
                new = {h: _neighbour_edits(text, w, sw, n=n, m=m)
                       for h, text, w, sw in zip(chunk, chunk_texts, words, swaps)}
                if store is not None:
                    store.put_many(key, new)
                found.update(new)
    finally:
        bar.close()
        if store is not None:
            store.close()
    out = [[_rebuild(t, e) for e in found[h]] for t, h in zip(texts, hashes)]
    none = sum(1 for x in out if not x)
    short = sum(1 for x in out if 0 < len(x) < n)
    if none:
        log.warning("%d of %d text(s) have %s replaceable word(s) under the generator tokenizer: no neighbours",
                    none, len(texts), "no" if m == 1 else f"fewer than {m}")
    if short:
        log.warning("%d of %d text(s) have fewer than %d possible neighbours and keep the ones there are",
                    short, len(texts), n)
    return out


def neighbour_energies(target: MaskedLM, texts: Sequence[str], *, generator=None, config: AuditConfig | None = None,
                       cache: SignalCache | None = None, device=None, progress: bool = True) -> np.ndarray:
    """Mean target energy of each text's neighbours.

    Parameters
    ----------
    target : MaskedLM
        The model under audit; neighbours are re-tokenised by its tokenizer.
    texts : sequence of str, length n_texts
    generator : MaskedLM, (model, tokenizer) or str, optional
        The masked LM proposing neighbours. Default: the local folder in
        ``config.neighbourhood.generator_model``.
    config : AuditConfig, optional
        ``neighbourhood`` settings, and ``signal`` (energy or PLL, seed, limits) for
        both the neighbour energies and the dropout seed.
    cache : SignalCache, optional
        Caches neighbours (as edits) and their energies: re-runs and new targets
        reuse them.

    Returns
    -------
    ndarray of shape (n_texts,), dtype float64
        ``mean_j E(x_j; theta)`` in nats (the unit of ``config.signal.kind``); NaN
        for a text without neighbours (no replaceable word).

    Raises
    ------
    ValueError
        No generator is given and ``config.neighbourhood.generator_model`` is None,
        or the generator has no trained MLM head.

    References
    ----------
    Mattern et al. (2023), Eq. 3: the neighbour mean is the difficulty term ``d(x)``.
    """
    config = config or AuditConfig()
    if generator is None:
        path = config.neighbourhood.generator_model
        if path is None:
            raise ValueError(
                "the neighbourhood attack needs a generator masked LM to propose neighbours: pass a reference "
                "model (reference=...) or set neighbourhood.generator_model to a local model folder, e.g. "
                "AuditConfig(neighbourhood={'generator_model': '/path/to/bert'})")
        generator = path
    texts = list(texts)
    sc = config.signal
    neighbours = generate_neighbours(generator, texts, config=config.neighbourhood, seed=sc.seed, device=device,
                                     progress=progress, cache=cache, max_length=sc.max_length,
                                     token_budget=sc.token_budget)
    out = np.full(len(texts), np.nan, dtype=np.float64)
    if not any(neighbours):
        return out
    shared = config.neighbourhood.shared_masks  # each neighbour masked from its sample's key (common random numbers)
    keys = [text_hash(t) for t in texts] if shared else [""] * len(texts)
    pairs = list(dict.fromkeys((x, k) for k, nb in zip(keys, neighbours) for x in nb))
    res = compute_signals(target, [x for x, _ in pairs], sc, cache=cache, device=device, progress=progress,
                          desc=f"{sc.kind} of neighbours", mask_keys=[k for _, k in pairs] if shared else None)
    energy = dict(zip(pairs, res.energy))
    for i, (k, nb) in enumerate(zip(keys, neighbours)):
        if nb:
            out[i] = float(np.mean([energy[(x, k)] for x in nb]))
    n_nan = int(np.isnan(out).sum())
    if n_nan:
        log.warning("%d of %d text(s) have no neighbours; their neighbour energy is NaN", n_nan, len(texts))
    return out
