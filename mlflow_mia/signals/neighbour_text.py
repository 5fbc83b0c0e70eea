"""Neighbour text handling: replaceable words, substitute filtering, top-n combinations, rebuilding.

The text side of the neighbourhood attack (Mattern et al. 2023, Sec. 2.2 and
Algorithm 1); :mod:`mlflow_mia.signals.neighbours` runs the generator.
Nothing here runs a model.

Rules
-----
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
* ``m > 1`` replacements: the exact ``n`` best combinations of ``m`` swaps at
  distinct words by joint log-probability (Algorithm 1), found by a dynamic
  programme over words that keeps the best partial combinations per number of
  swaps. Each word's candidates are its top ``n`` substitutes, which cannot
  exclude a member of the overall top ``n``.
* Ties are broken by word order, then by substitute rank; identical neighbour
  texts are kept once and the original text is never its own neighbour.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["replaceable_words"]

_BOUNDARY_MARKERS = ("Ġ", "▁")  # byte-level BPE (RoBERTa, GPT-2) and SentencePiece word-start markers
SLACK = 8  # extra candidates kept so that dropping duplicate neighbour texts still leaves n


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


def vocab_tables(tokenizer, size: int) -> tuple[np.ndarray, list[str], bool]:
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


def keep_substitutes(word: int, original: str, logprobs, token_ids, *, surfaces, uncased: bool,
                     top_k: int) -> list:
    """The first ``top_k`` substitutes of one word, from candidates sorted by descending log-prob.

    Candidates with a non-finite log-prob end the list; a substitute equal to
    the original word (case-insensitively) is skipped; with an uncased generator
    the substitute takes the original's case pattern (:func:`_match_case`).
    Runs once per replaceable word of every text on the host: the original's
    lower case and case pattern are read once, the candidates as Python numbers.

    Returns
    -------
    list of Swap
    """
    kept = []
    lowered = original.lower()
    upper = len(original) > 1 and original.isupper()
    title = not upper and original[:1].isupper()
    for lp, t in zip(np.asarray(logprobs).tolist(), np.asarray(token_ids).tolist()):
        if len(kept) == top_k or not math.isfinite(lp):
            break
        surface = surfaces[t]
        if surface.lower() == lowered:
            continue
        if uncased and upper:
            surface = surface.upper()
        elif uncased and title:
            surface = surface[:1].upper() + surface[1:]
        kept.append(Swap(word=word, token_id=t, replacement=surface, logprob=lp))
    return kept


def best_combinations(swaps: list[list[Swap]], *, n: int, m: int) -> list[tuple[float, tuple[Swap, ...]]]:
    """The ``n`` best combinations of ``m`` swaps at distinct words, by summed log-probability.

    Exact: a dynamic programme over words keeping the ``n`` best partial
    combinations per number of swaps (a prefix outside its state's top ``n`` cannot
    extend to a combination in the overall top ``n``). Ties: word order, then rank.
    """
    if m == 1:  # the same order without the programme: the n best single swaps over every word
        ranked = heapq.nsmallest(n, ((-sw.logprob, sw.word, r, sw) for cands in swaps for r, sw in enumerate(cands)))
        return [(-neg, (sw,)) for neg, _, _, sw in ranked]

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


def neighbour_edits(text: str, words: list[Word], swaps: list[list[Swap]], *, n: int, m: int) -> list:
    """Edits of the ``n`` best distinct neighbours of one text (none equal to the text)."""
    edits, seen = [], {text}
    for _, combo in best_combinations(swaps, n=n + SLACK, m=m):
        e = _edits(words, combo)
        nb = rebuild(text, e)
        if nb not in seen:
            seen.add(nb)
            edits.append(e)
        if len(edits) == n:
            break
    return edits


def rebuild(text: str, edits) -> str:
    for start, end, word in sorted(edits, reverse=True):
        text = text[:start] + word + text[end:]
    return text
