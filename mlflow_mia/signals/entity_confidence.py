"""Entity confidence of a token-classification (NER) model: the signal of the NER audit.

For a name ``e`` put into the slot of a prompt, Xia et al. (2025, Sect. 3.3)
define ``C(e) = (1 / |T_e|) sum_{t in T_e} max(P(B-type | t), P(I-type | t))``,
the softmax taken over all tags of the model. ``T_e`` are the name's tokens:

- ``subword="first"`` (default): the first subword of each whitespace word of the
  name (the usual Hugging Face word alignment; one value per word);
- ``subword="mean"``: every subword token of the name (the paper's ``T_e`` read
  literally).

Tag ids come from ``model.config.label2id`` (``B-person`` / ``I-person`` or
``B-PER`` / ``I-PER``: the type is spelled as the model spells it). All prompt x
name sentences of a run go through the model in length-sorted batches under a
token budget; values are cached on disk per (model, tokenizer, tags, settings,
type, prompt, name), the name only as part of a sha256, so a stopped run resumes.
The model part of that key is the weights digest, the config digest (architecture
settings of ``config.json`` and the model class) and the tokenizer digest; each
cached row carries a keyed MAC (:class:`ConfidenceCache`).

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language
   model-based named entity recognition", PLoS One 20(9), 2025, Eq. 1.
"""

from __future__ import annotations

import hashlib
import logging
import os
import reprlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from mlflow_mia.progress import bar as progress_bar

from mlflow_mia.data import canonical_text
from mlflow_mia.signals.batching import bucket_width, pad_batch, plan_batches, run_batches
from mlflow_mia.signals.cache import SqliteSpecStore, make_cache_dir, default_cache_dir
from mlflow_mia.signals.identity import ModelIdentity, refuse_missing_weights, refuse_remote_code
from mlflow_mia.signals.last_layer import hidden_at, last_layer_of, probe_batch
from mlflow_mia.signals.runtime import (DeviceResults, autocast_for, default_token_budget, dtype_setting,
                                        resolve_device, resolve_dtype, to_device, uses_length_buckets)
from mlflow_mia.signals.placement import place_model

__all__ = ["TokenClassifier", "ConfidenceCache", "entity_tag_ids", "entity_confidence", "TOKEN_BUDGETS", "SLOT",
           "fill", "split_prompt", "short"]

#: The name slot of a prompt (Xia et al. 2025 write it MASK): ``"My name is {name}."``
SLOT = "{name}"


def short(text) -> str:
    """``repr(text)`` cut to about 80 characters (with '...'): a prompt quoted in an error message, not dumped."""
    cut = reprlib.Repr()
    cut.maxstring = 80
    return cut.repr(text)


def split_prompt(prompt: str) -> tuple[str, str]:
    """``(text before the slot, text after it)``; the prompt must hold exactly one slot.

    Raises
    ------
    ValueError
        Zero or several ``{name}`` slots.
    """
    n = prompt.count(SLOT)
    if n != 1:
        raise ValueError(f"a prompt needs exactly one {SLOT} slot, found {n} in {short(prompt)}")
    before, after = prompt.split(SLOT)
    return before, after


def fill(prompt: str, name: str) -> tuple[str, int]:
    """The sentence with ``name`` in the slot, and the character offset where the name starts."""
    before, after = split_prompt(prompt)
    return before + name + after, len(before)


SUBWORD_MODES = ("first", "mean")
# CPU: 16,384 padded tokens per pass. Sentences are short (12 tokens on average in benchmarks/bench_ner.py), so
# 4,096 gave batches of 50-100 sentences (plan_batches closes a batch at a shorter row once it holds a quarter of
# the budget) and many small products: 16,384 ran 1.5x faster than 4,096 and 1.2x faster than 32,768
# (500 sentences, MiniLM-L6, 2 loaded cores, medians of 8-10 alternated rounds).
TOKEN_BUDGETS = {"cpu": 16384, "cuda": 32768}
_CHUNK = 4096  # sentences tokenized, scored and committed to the cache at a time

log = logging.getLogger(__name__)


def entity_tag_ids(label2id, entity_type: str) -> tuple[int, int]:
    """``(id of B-type, id of I-type)`` read from a model's ``label2id``.

    A type with a ``B-`` tag but no ``I-`` tag (single-token entities only) returns
    the ``B-`` id twice.

    Raises
    ------
    ValueError
        ``label2id`` has no ``B-{entity_type}`` tag (lists the types it has).

    >>> entity_tag_ids({"O": 0, "I-PER": 2, "B-PER": 1}, "PER")
    (1, 2)
    """
    label2id = {str(k): int(v) for k, v in dict(label2id or {}).items()}
    b, i = label2id.get(f"B-{entity_type}"), label2id.get(f"I-{entity_type}")
    if b is None:
        types = sorted({k[2:] for k in label2id if k[:2] in ("B-", "I-")})
        raise ValueError(f"the model has no tag B-{entity_type}; its entity types are {types} (tags "
                         f"{sorted(label2id)[:12]}). Name the types as the model's config.label2id spells them")
    return b, (i if i is not None else b)


@dataclass
class TokenClassifier(ModelIdentity):
    """A Hugging Face token-classification model, its fast tokenizer and a cache identity.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        An ``AutoModelForTokenClassification`` model whose ``config.label2id`` holds
        BIO tags.
    tokenizer : transformers.PreTrainedTokenizerFast
        Its tokenizer (a fast one: character offsets locate the name's tokens).
    model_id : str, optional
        Identity shown in reports and params (e.g. ``models:/wnut-ner-a/1``); default:
        sha256 of the weights. The cache is keyed by :attr:`weights_id`, never by this name.
    name : str, optional

    Raises
    ------
    ValueError
        No token-classification head, no BIO tags, a slow tokenizer or no pad token.
    """

    _fast: object = field(default=None, init=False, repr=False)  # (last layer, head) of _fast_head; False: none

    def __post_init__(self):
        cls = type(self.model).__name__
        config = getattr(self.model, "config", None)
        if not cls.endswith("ForTokenClassification"):
            raise ValueError(f"{cls} is not a token-classification model; the NER audit needs an "
                             "AutoModelForTokenClassification with BIO tags in config.label2id (a fine-tuned NER "
                             "model), logged with task='token-classification'")
        tags = [str(k) for k in (getattr(config, "label2id", None) or {})]
        if not any(t[:2] == "B-" for t in tags):
            raise ValueError(f"{cls} has no BIO tags in config.label2id (got {tags[:8]}); set config.label2id/"
                             "id2label to the tag names used in training, e.g. {'O': 0, 'B-person': 1, ...}")
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"tokenizer {type(self.tokenizer).__name__} is not a fast tokenizer; load it with "
                             "AutoTokenizer.from_pretrained(..., use_fast=True): names are located by offsets")
        if getattr(self.tokenizer, "pad_token_id", None) is None:
            raise ValueError(f"tokenizer {type(self.tokenizer).__name__} has no pad token; set tokenizer.pad_token")
        if self.model_id is None:
            self.model_id = self.weights_id
        self.name = self.name or self.model_id
        self.model.eval()

    @classmethod
    def from_pretrained(cls, path, *, model_id: str | None = None, name: str | None = None,
                        trust_remote_code: bool = False) -> "TokenClassifier":
        """Load ``AutoModelForTokenClassification`` and its tokenizer from a local folder.

        Raises
        ------
        ValueError
            The checkpoint has no token-classification head (its weights would be random),
            or it ships Python code and ``trust_remote_code`` is off
            (:func:`~mlflow_mia.signals.identity.refuse_remote_code`).
        """
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        path = os.fspath(path)
        if not trust_remote_code and os.path.isdir(path):
            refuse_remote_code(path)
        model, info = AutoModelForTokenClassification.from_pretrained(path, output_loading_info=True,
                                                                      trust_remote_code=trust_remote_code)
        refuse_missing_weights(info, path, head=("classifier",), head_name="token-classification head",
                               fix="Fine-tune it for NER first")
        return cls(model, AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code),
                   model_id=model_id, name=name or path)

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                  cols: torch.Tensor, *, max_per_row: int | None = None) -> torch.Tensor:
        """Tag logits at positions ``(rows[i], cols[i])`` of a padded batch, shape (n_positions, n_tags).

        Equal to ``model(input_ids, attention_mask).logits[rows, cols]``. When the model
        is a BERT-like encoder under one linear ``classifier`` (:func:`_fast_head`: BERT,
        RoBERTa, XLM-R, ELECTRA, ...), its last layer runs the keys and values at every
        position and the rest only at the read positions
        (:func:`~mlflow_mia.signals.last_layer.hidden_at`), and the classifier only
        there: about 5/6 of the last layer's products are skipped, as a name is a few
        of a sentence's tokens. Other models run the full forward pass.

        Parameters
        ----------
        input_ids, attention_mask : Tensor (int64), shape (batch, length)
        rows, cols : Tensor (int64), shape (n_positions,)
        max_per_row : int, optional: the most positions read in one row, when known on the host
        """
        if self._fast is None:
            self._fast = _fast_head(self.model) or False
        if self._fast is False:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits[rows, cols]
        last, head = self._fast
        return head(hidden_at(self.model.base_model, last, input_ids, attention_mask, rows, cols,
                              max_per_row=max_per_row))

    @property
    def label2id(self) -> dict:
        return {str(k): int(v) for k, v in self.model.config.label2id.items()}

    @property
    def max_length(self) -> int:
        limits = [getattr(self.tokenizer, "model_max_length", None),
                  getattr(self.model.config, "max_position_embeddings", None)]
        limits = [x for x in limits if isinstance(x, int) and 0 < x < 1_000_000]
        return min(limits) if limits else 512


def _fast_head(model: torch.nn.Module, *, tolerance: float = 1e-5) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """``(last encoder layer, classifier)`` when they reproduce ``model(...).logits`` at chosen positions, else None.

    The model must have a BERT-like ``base_model``
    (:func:`~mlflow_mia.signals.last_layer.last_layer_of`) and a ``classifier`` linear
    layer read at each position (dropout is off in eval mode); checked once on a
    random 2 x 7 batch with padding against the full forward pass, to ``tolerance``
    times the logits' largest magnitude (at least 1).
    """
    head, encoder = getattr(model, "classifier", None), getattr(model, "base_model", None)
    if not isinstance(head, torch.nn.Linear) or encoder is None or encoder is model:
        return None
    last = last_layer_of(encoder)
    if last is None:
        return None
    ids, mask, rows, cols = probe_batch(model.config, next(model.parameters()).device)
    try:
        with torch.inference_mode():
            expected = model(input_ids=ids, attention_mask=mask).logits[rows, cols].float()
            got = head(hidden_at(encoder, last, ids, mask, rows, cols)).float()
    except Exception as exc:  # noqa: BLE001 - any mismatch of structure keeps the full pass
        log.debug("tag logits at the read positions only not applicable (%s: %s)", type(exc).__name__, exc)
        return None
    scale = max(float(expected.abs().max()), 1.0)
    if got.shape != expected.shape or float((got - expected).abs().max()) > tolerance * scale:
        log.debug("tag logits at the read positions differ from the full pass; running the full model")
        return None
    return last, head


class ConfidenceCache(SqliteSpecStore):
    """On-disk map ``(spec key, sha256(type, prompt, name)) -> (C(e), n_tokens)``.

    A :class:`~mlflow_mia.signals.cache.SqliteSpecStore`: every row carries
    ``HMAC-SHA256`` under the store key kept outside the cache folder
    (:mod:`mlflow_mia.signals.store_key`); a row that does not verify is recomputed,
    never used.

    Parameters
    ----------
    path : str or os.PathLike, optional
        A directory (``ner_confidence.sqlite`` is created in it) or a ``.sqlite``
        file; default :func:`~mlflow_mia.signals.cache.default_cache_dir`.
    """

    table = "ner_confidence_rows"
    columns = ("confidence REAL", "n_tokens INTEGER")

    def __init__(self, path=None):
        path = os.fspath(path or default_cache_dir())
        if not path.endswith(".sqlite"):
            make_cache_dir(path)
            path = os.path.join(path, "ner_confidence.sqlite")
        super().__init__(path)

    def get_many(self, key: str, items: Sequence[str]) -> dict[str, tuple[float, int]]:
        """Cached ``(C(e), n_tokens)`` of ``items`` under ``key`` (missing or damaged rows are absent)."""
        return {h: (float(c), int(n)) for h, (c, n) in self.get_rows(key, items).items()}

    def put_many(self, key: str, rows: dict[str, tuple[float, int]]) -> None:
        """Store ``item -> (C(e), n_tokens)`` in one transaction."""
        self.put_rows(key, {h: (float(c), int(n)) for h, (c, n) in rows.items()})


def _item_hash(entity_type: str, prompt: str, name: str) -> str:
    return hashlib.sha256("\x1f".join((entity_type, prompt, name)).encode("utf-8")).hexdigest()


def _word_spans(name: str, start: int) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for word in name.split():
        pos = name.index(word, pos)
        spans.append((start + pos, start + pos + len(word)))
        pos += len(word)
    return spans


def _name_positions(offsets, spans, subword: str) -> list[int]:
    """Token positions read for a name: first subword per word, or every subword."""
    offsets = np.asarray(offsets)
    real = offsets[:, 1] > offsets[:, 0]
    out = []
    for a, b in spans:
        hit = np.flatnonzero(real & (offsets[:, 0] < b) & (offsets[:, 1] > a))
        if hit.size == 0:
            return []
        out.extend(hit[:1].tolist() if subword == "first" else hit.tolist())
    return sorted(set(out)) if subword == "mean" else out


def _encode(clf: TokenClassifier, prompts, names, subword: str):
    """Token ids and read positions of each ``prompt x name`` sentence."""
    filled = [fill(p, n) for p, n in zip(prompts, names)]
    # split_special_tokens: a name such as "[SEP]" is text, not the tokenizer's separator (as in signals/energy.py)
    enc = clf.tokenizer([s for s, _ in filled], return_offsets_mapping=True, truncation=True,
                        max_length=clf.max_length, add_special_tokens=True, split_special_tokens=True)
    ids, positions = [], []
    for k, ((_, start), name) in enumerate(zip(filled, names)):
        pos = _name_positions(enc["offset_mapping"][k], _word_spans(name, start), subword)
        if not pos:
            raise ValueError(f"sentence {k} (prompt {short(prompts[k])}) loses its name to truncation at "
                             f"{clf.max_length} tokens, or the name has no tokens; shorten the prompt")
        ids.append(np.asarray(enc["input_ids"][k], dtype=np.int64))
        positions.append(pos)
    return ids, positions


@torch.inference_mode()
def _score(clf: TokenClassifier, ids, positions, tag_pairs, *, token_budget: int, device, bar,
           dtype: torch.dtype = torch.float32, buckets: bool | None = None) -> np.ndarray:
    """C(e) of each encoded sentence; ``tag_pairs[k] = (B id, I id)``.

    Per-token ``max(P(B), P(I))`` stays on the device until one copy at the end; means in float64 on the host.
    """
    out, lengths = np.empty(len(ids), dtype=np.float64), np.array([len(x) for x in ids], dtype=np.int64)
    buckets = uses_length_buckets(device) if buckets is None else buckets
    width = (lambda n: bucket_width(n, clf.max_length)) if buckets else None
    results = DeviceResults(device)

    def step(batch: np.ndarray) -> None:
        input_ids, mask = pad_batch([ids[k] for k in batch], clf.tokenizer.pad_token_id,
                                    width(int(lengths[batch].max())) if width else None)
        rows = np.concatenate([np.full(len(positions[k]), r, dtype=np.int64) for r, k in enumerate(batch)])
        cols = np.concatenate([np.asarray(positions[k], dtype=np.int64) for k in batch])
        tags = np.concatenate([np.tile(np.int64(tag_pairs[k]), (len(positions[k]), 1)) for k in batch])
        logits = clf.logits_at(to_device(input_ids, device), to_device(mask, device), to_device(rows, device),
                               to_device(cols, device), max_per_row=max(len(positions[k]) for k in batch))
        probs = torch.softmax(logits.float(), dim=-1)  # max(P(B), P(I)) at each of the name's tokens:
        results.add((batch, rows), probs.gather(1, to_device(tags, device)).amax(dim=1))
        bar.update(len(batch))

    with autocast_for(dtype, device):
        run_batches(plan_batches(lengths, token_budget, width=width), lengths, step, width=width, device=device)
    for (batch, rows), per_token in results.to_host():
        sums = np.bincount(rows, weights=per_token, minlength=len(batch))
        out[batch] = sums / np.bincount(rows, minlength=len(batch))
    return out


def entity_confidence(clf: TokenClassifier, prompts: Sequence[str], names: Sequence[str],
                      entity_types: Sequence[str], *, subword: str = "first", token_budget: int | None = None,
                      device=None, cache: ConfidenceCache | None = None, progress: bool = True,
                      desc: str | None = None, batch_size: int | None = None, dtype: str | None = "auto") -> np.ndarray:
    """Entity confidence ``C(e)`` of each ``(prompt, name, type)`` triple.

    Parameters
    ----------
    clf : TokenClassifier
    prompts, names, entity_types : sequences of str, length n
        Row ``k`` puts ``names[k]`` into the ``{name}`` slot of ``prompts[k]`` and reads
        the ``B-``/``I-`` tags of ``entity_types[k]``. The prompt ``"{name}"`` is the
        name alone (the -PT baseline).
    subword : {"first", "mean"}
        Tokens read per name (module docstring).
    token_budget : int, optional
        Padded tokens per forward pass (default :data:`TOKEN_BUDGETS`: 16384 on CPU; on CUDA sized to its memory).
    batch_size : int, optional
        Sentences per forward pass instead: sets the budget to ``batch_size`` times the
        longest sentence of each chunk of 4,096 sentences (overrides ``token_budget``).
    device : str or torch.device, optional
        Default: CUDA when available. The model is moved there.
    cache : ConfidenceCache, optional
        Rows already cached are not recomputed; new rows are committed every 4,096 sentences.
    progress : bool
        tqdm bar over sentences.
    dtype : {"auto", "float32", "bfloat16", "float16"}
        Compute type of the products (:func:`~mlflow_mia.signals.runtime.resolve_dtype`); softmax in float32.

    Returns
    -------
    ndarray of shape (n,), float64
        Values in [0, 1].

    Raises
    ------
    ValueError
        Unequal lengths, an unknown ``subword``, a prompt without exactly one slot, an
        empty name or one of invisible characters only (:func:`mlflow_mia.data.canonical_text`
        folds it to nothing), a type the model has no ``B-`` tag for, or a name lost to truncation.
    """
    prompts, names, entity_types = list(prompts), list(names), list(entity_types)
    if not (len(prompts) == len(names) == len(entity_types)):
        raise ValueError(f"prompts, names and entity_types differ in length: {len(prompts)}, {len(names)}, "
                         f"{len(entity_types)}")
    if subword not in SUBWORD_MODES:
        raise ValueError(f"subword must be one of {SUBWORD_MODES}, got {subword!r}")
    if any(not isinstance(n, str) or not n.strip() for n in names):
        raise ValueError("empty names cannot be scored: drop blank rows of the names table")
    invisible = [k for k, n in enumerate(names) if not canonical_text(n)]
    if invisible:
        raise ValueError(f"name {invisible[0]} ({len(invisible)} in all) is made only of invisible characters "
                         "(zero-width, format or default-ignorable code points, combining marks): it has no letters "
                         "for the model to tag; drop it")
    tags = {t: entity_tag_ids(clf.label2id, t) for t in dict.fromkeys(entity_types)}
    device = resolve_device(device)
    compute_type = resolve_dtype(dtype, device)
    device = place_model(clf.model, device)  # a model placed by accelerate stays where it is
    budget = int(token_budget or default_token_budget(device, model=clf.model, dtype=compute_type,
                                                      table=TOKEN_BUDGETS))
    spec = {"signal": "ner_entity_confidence", "version": 1, "weights": clf.weights_id, "config": clf.config_id,
            "tokenizer": clf.tokenizer_id, "label2id": sorted(clf.label2id.items()), "subword": subword,
            "max_length": clf.max_length}
    spec["tokenization"] = "split_special_tokens"  # special-token strings in names and prompts are text
    spec.update(dtype_setting(dtype, device))  # float32 on CPU adds nothing: earlier caches keep their keys
    key = cache.register(spec) if cache is not None else None
    items = [_item_hash(t, p, n) for p, n, t in zip(prompts, names, entity_types)]
    values = np.full(len(items), np.nan)
    if cache is not None:
        hits = cache.get_many(key, items)
        for k, h in enumerate(items):
            if h in hits:
                values[k] = hits[h][0]
    todo = np.flatnonzero(np.isnan(values))
    with progress_bar(total=len(todo), desc=desc or f"entity confidence {clf.name}", unit="sent",
                      progress=progress and len(todo) > 0) as bar:
        for start in range(0, len(todo), _CHUNK):
            part = todo[start:start + _CHUNK]
            ids, positions = _encode(clf, [prompts[k] for k in part], [names[k] for k in part], subword)
            if batch_size:
                budget = int(batch_size) * max(len(x) for x in ids)
            scored = _score(clf, ids, positions, [tags[entity_types[k]] for k in part], token_budget=budget,
                            device=device, bar=bar, dtype=compute_type)
            values[part] = scored
            if cache is not None:
                cache.put_many(key, {items[k]: (v, len(p)) for k, v, p in zip(part, scored, positions)})
    return values
