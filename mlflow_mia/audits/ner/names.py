"""Entity names of a BIO-tagged corpus and the detection set of a NER model.

The detection set of Xia et al. (2025, Sect. 3.1) holds, per entity type, as many
in-sample names (entities of the model's training split) as out-of-sample names
(entities that never occur in it), split into dev and test. Names are compared
case-insensitively and de-duplicated; the first surface form seen is kept.

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language
   model-based named entity recognition", PLoS One 20(9), 2025.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from mlflow_mia.config import ENTITY_TYPE_PATTERN
from mlflow_mia.data import canonical_text, surrogate_at
from mlflow_mia.hashing import lookup_hash

__all__ = ["read_conll", "entity_names", "detection_set", "check_names_table", "read_private_table"]

NAME_COLUMNS = ("name", "entity_type", "is_member")

def _normalise(name: str) -> str:
    return " ".join(name.split()).lower()


def name_hash(name: str, key) -> str:
    """First 16 hex digits of the keyed hash of the normalised name: a name's identity in artifacts.

    The same scheme as the logged text hashes (:func:`mlflow_mia.lookup_hash` of the
    normalised name, truncated): keyed because names are guessable, so an unkeyed
    hash next to a membership label would let anyone who reads the run test a
    candidate name. Normalised: whitespace collapsed, lower case.

    Parameters
    ----------
    name : str
    key : HashKey, bytes or str
        The audit's key, resolved once at its boundary (``hash_key_file``,
        ``$MLFLOW_MIA_HASH_KEY`` or a random key: :func:`mlflow_mia.hashing.resolve_hash_key`).
    """
    return lookup_hash(_normalise(name), key)[:16]


def read_conll(path, *, separator: str | None = "\t") -> list[dict]:
    """Read a CoNLL / BIO file: one ``token<sep>tag`` per line, sentences split by blank lines.

    Parameters
    ----------
    path : str or os.PathLike
        The file. A line holding only whitespace (WNUT-16 writes a lone tab) ends a sentence.
    separator : str or None
        Column separator; None splits on any whitespace. The tag is the last column.

    Returns
    -------
    list of dict
        ``{"tokens": [str, ...], "tags": [str, ...]}`` per sentence, in file order.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        A non-blank line without a tag column (names the line number).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such CoNLL file: {path}")
    sentences: list[dict[str, list[str]]] = []
    tokens: list[str] = []
    tags: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                if tokens:
                    sentences.append({"tokens": tokens, "tags": tags})
                    tokens, tags = [], []
                continue
            parts = line.rstrip("\n").split(separator) if separator else line.split()
            if len(parts) < 2 or not parts[-1].strip():
                raise ValueError(f"{path}:{lineno}: expected 'token{separator or ' '}tag', got {line.rstrip()!r}")
            tokens.append(parts[0].strip())
            tags.append(parts[-1].strip())
    if tokens:
        sentences.append({"tokens": tokens, "tags": tags})
    return sentences


def extract_entities(tokens: Sequence[str], tags: Sequence[str]) -> list[tuple[str, str]]:
    """Entities of one BIO-tagged sentence as ``(entity_type, name)``.

    ``B-x`` opens an entity, ``I-x`` continues an open entity of type ``x`` (an
    ``I-x`` after ``O`` or another type opens one, as conlleval does), anything
    else closes it. The name is its tokens joined by single spaces.

    >>> extract_entities(["Ann", "Lee", "in", "New", "York"], ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"])
    [('PER', 'Ann Lee'), ('LOC', 'New York')]
    """
    if len(tokens) != len(tags):
        raise ValueError(f"a sentence has {len(tokens)} tokens but {len(tags)} tags")
    out, kind, words = [], None, []
    for token, tag in zip(tokens, tags):
        prefix, _, label = str(tag).partition("-")
        if prefix == "I" and kind == label:
            words.append(token)
            continue
        if kind is not None:
            out.append((kind, " ".join(words)))
            kind, words = None, []
        if prefix in ("B", "I") and label:
            kind, words = label, [token]
    if kind is not None:
        out.append((kind, " ".join(words)))
    return out


def _sentences(corpus) -> list[dict]:
    """Sentences from a list of dicts, a pandas DataFrame or a ``datasets.Dataset``."""
    names = None
    if hasattr(corpus, "features") and hasattr(corpus, "column_names"):  # datasets.Dataset
        feature = corpus.features.get("tags") or corpus.features.get("ner_tags")
        names = getattr(getattr(feature, "feature", None), "names", None)
        corpus = corpus.to_pandas()
    if hasattr(corpus, "to_dict") and hasattr(corpus, "columns"):
        tag_col = "tags" if "tags" in corpus.columns else "ner_tags"
        if "tokens" not in corpus.columns or tag_col not in corpus.columns:
            raise ValueError(f"a NER table needs columns 'tokens' and 'tags' (or 'ner_tags'); got "
                             f"{list(corpus.columns)}")
        corpus = [{"tokens": list(t), "tags": list(g)} for t, g in zip(corpus["tokens"], corpus[tag_col])]
    out = []
    for s in corpus:
        tags = [names[int(t)] if names is not None and not isinstance(t, str) else t for t in s["tags"]]
        if any(not isinstance(t, str) for t in tags):
            raise ValueError("integer NER tags need their names: pass a datasets.Dataset whose 'tags' feature is "
                             "a Sequence(ClassLabel(names=[...])) or convert the tags to strings such as 'B-PER'")
        out.append({"tokens": list(s["tokens"]), "tags": tags})
    return out


def entity_names(corpus) -> "OrderedDict[str, OrderedDict[str, str]]":
    """De-duplicated entity names per type: ``{type: {lower-cased name: first surface form}}``.

    Parameters
    ----------
    corpus : list of dict, pandas.DataFrame or datasets.Dataset
        Sentences with ``tokens`` and ``tags`` (strings ``B-x``/``I-x``/``O``, or class
        ids of a ``datasets`` ``ClassLabel`` feature).
    """
    found: OrderedDict = OrderedDict()
    for s in _sentences(corpus):
        for kind, name in extract_entities(s["tokens"], s["tags"]):
            found.setdefault(kind, OrderedDict()).setdefault(name.lower(), name)
    return found


def detection_set(train, other, *, entity_types: Iterable[str] | None = None, min_names: int = 1,
                  max_names_per_class: int | None = None, dev_fraction: float = 0.5, seed: int = 0,
                  exclusive: bool = False):
    """In-sample vs out-of-sample names per type, balanced, with a seeded dev/test split.

    Parameters
    ----------
    train : corpus
        The split the model was trained on (see :func:`entity_names` for the forms).
    other : corpus
        Text the model never saw; its names that do not occur in ``train``
        (case-insensitively) are the out-of-sample names.
    entity_types : iterable of str, optional
        Types to keep (default: every type with at least ``min_names`` names per class).
    min_names : int
        Fewest names per class a type needs (an asked-for type below it is an error).
    max_names_per_class : int, optional
        Cap of names per class and type (sampled with ``seed``).
    dev_fraction : float in (0, 1)
        Share of each class and type that goes to dev.
    seed : int
    exclusive : bool
        Keep only in-sample names that do not occur in ``other`` either. Needed when
        ``other`` trained a second model whose labels are the swapped ones (each
        model the other's control): a name of both halves is in both training sets.

    Returns
    -------
    pandas.DataFrame
        Columns ``name`` (str), ``entity_type`` (str), ``is_member`` (int, 1 = in-sample),
        ``split`` (``"dev"`` / ``"test"``); per type equally many members and non-members.

    Raises
    ------
    ValueError
        An asked-for type is missing or has fewer than ``min_names`` names per class.
    """
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    seen, outside = entity_names(train), entity_names(other)
    inside = seen
    if exclusive:
        inside = OrderedDict((t, OrderedDict((k, v) for k, v in d.items() if k not in outside.get(t, {})))
                             for t, d in seen.items())
    counts = {t: (len(inside.get(t, {})), len([k for k in outside.get(t, {}) if k not in seen.get(t, {})]))
              for t in dict.fromkeys([*inside, *outside])}
    if entity_types is None:
        types = [t for t, (a, b) in counts.items() if min(a, b) >= min_names]
    else:
        types = list(entity_types)
        short = {t: counts.get(t, (0, 0)) for t in types if min(counts.get(t, (0, 0))) < max(min_names, 1)}
        if short:
            raise ValueError(f"entity types with too few names (in-sample, out-of-sample): {short}; need at least "
                             f"{max(min_names, 1)} per class. Types found: {counts}")
    rng = np.random.default_rng(seed)
    rows = []
    for kind in types:
        ins = list(inside[kind].values())
        outs = [v for k, v in outside[kind].items() if k not in seen[kind]]
        n = min(len(ins), len(outs), max_names_per_class or len(ins))
        for label, pool in ((1, ins), (0, outs)):
            picked = [pool[i] for i in sorted(rng.choice(len(pool), size=n, replace=False))]
            order = rng.permutation(n)
            n_dev = int(round(dev_fraction * n))
            for rank, i in enumerate(order):
                rows.append((picked[i], kind, label, "dev" if rank < n_dev else "test"))
    return pd.DataFrame(rows, columns=[*NAME_COLUMNS, "split"])


def check_names_table(names, *, entity_types: Iterable[str] | None = None, label_column: str = "is_member"):
    """Validate a user's names table and return a clean copy.

    Parameters
    ----------
    names : pandas.DataFrame
        Columns ``name`` (str), ``entity_type`` (str) and the 0/1 label column
        (1 = in the model's training data); an optional ``split`` (dev/test).
    entity_types : iterable of str, optional
        Types to keep; asking for a type the table does not hold is an error.

    Returns
    -------
    pandas.DataFrame
        Columns ``name``, ``entity_type``, ``is_member`` (int) and ``split`` when given;
        names stripped.

    Raises
    ------
    ValueError
        Missing columns, empty or missing names, names that are not valid Unicode (a lone
        surrogate) or are empty once folded (:func:`mlflow_mia.data.canonical_text`: zero-width,
        format or default-ignorable characters and combining marks only, each with its own
        message), labels other than 0/1, a name labelled both 1 and 0 within a type (compared
        as :func:`name_hash` compares names, and up to the fold of
        :func:`mlflow_mia.data.canonical_text`: invisible characters, combining marks such as
        accents, compatibility forms), a type with one class only, or unknown types.
    """
    if not isinstance(names, pd.DataFrame):
        raise ValueError(f"the names table must be a pandas DataFrame, got {type(names).__name__}")
    missing = [c for c in ("name", "entity_type", label_column) if c not in names.columns]
    if missing:
        raise ValueError(f"the names table lacks column(s) {missing}; it needs name, entity_type and "
                         f"{label_column} (1 = in the training data), got {list(names.columns)}")
    if names.empty:
        raise ValueError("the names table is empty: give in-sample and out-of-sample names")
    df = names.rename(columns={label_column: "is_member"}).copy()
    bad = [i for i, n in enumerate(df["name"]) if not isinstance(n, str) or not n.strip()]
    if bad:
        raise ValueError(f"the names table has {len(bad)} empty or non-string name(s) (first at row {bad[0]}); "
                         "drop them")
    broken = [(i, surrogate_at(n)) for i, n in enumerate(df["name"]) if surrogate_at(n) is not None]
    if broken:
        raise ValueError(f"the names table has {len(broken)} name(s) that are not valid Unicode: a lone surrogate "
                         f"(first at row {broken[0][0]}, character {broken[0][1]}); fix the file's encoding or drop "
                         "them")
    invisible = [i for i, n in enumerate(df["name"]) if not canonical_text(n)]
    if invisible:
        raise ValueError(f"the names table has {len(invisible)} name(s) made only of invisible characters "
                         f"(zero-width, format or default-ignorable code points, combining marks; first at row "
                         f"{invisible[0]}): they have no letters for the model to tag; drop them")
    df["name"] = [" ".join(n.split()) for n in df["name"]]
    labels = pd.to_numeric(df["is_member"], errors="coerce")
    if labels.isna().any() or not labels.isin([0, 1]).all():
        raise ValueError(f"column {label_column!r} must hold 0/1 (1 = in-sample), got "
                         f"{sorted(map(str, pd.unique(df['is_member'])))[:5]}")
    df["is_member"] = labels.astype(int)
    _refuse_conflicting_labels(df, label_column)
    present = list(dict.fromkeys(df["entity_type"].astype(str)))
    bad_types = [t for t in present if not re.fullmatch(ENTITY_TYPE_PATTERN, t)]
    if bad_types:
        raise ValueError(f"entity type(s) {bad_types} may only hold letters, digits, _ - . and spaces (they name "
                         "the metrics ner/<type>/...); rename them in the names table")
    if entity_types is not None:
        unknown = [t for t in entity_types if t not in present]
        if unknown:
            raise ValueError(f"entity type(s) {unknown} not in the names table; it holds {present}")
        df = df[df["entity_type"].isin(list(entity_types))]
    one_class = {t: int(g["is_member"].iloc[0]) for t, g in df.groupby("entity_type") if g["is_member"].nunique() < 2}
    if one_class:
        raise ValueError(f"entity type(s) with one class only {one_class} (type: the only label): each type needs "
                         "in-sample (1) and out-of-sample (0) names")
    if "split" in df.columns and not set(df["split"]).issubset({"dev", "test"}):
        raise ValueError(f"column 'split' must hold 'dev' or 'test', got {sorted(set(map(str, df['split'])))}")
    cols = [c for c in (*NAME_COLUMNS, "split") if c in df.columns]
    return df[cols].reset_index(drop=True)


def _refuse_conflicting_labels(df, label_column: str) -> None:
    """A name labelled both in-sample (1) and out-of-sample (0) within one entity type is an error (rows named)."""
    keys = [(str(t), _normalise(canonical_text(n))) for t, n in zip(df["entity_type"], df["name"])]
    rows: dict = {}
    for i, (key, y) in enumerate(zip(keys, df["is_member"])):
        rows.setdefault(key, {}).setdefault(int(y), []).append(i)
    both = [sorted(r[0] + r[1]) for r in rows.values() if len(r) == 2]
    if both:
        raise ValueError(f"{len(both)} name(s) are labelled both in-sample and out-of-sample in {label_column!r} "
                         f"within one entity type (first: rows {both[0][:5]}; names are compared ignoring case, "
                         "spacing, invisible characters, combining marks such as accents and compatibility forms): "
                         "a name either occurs in the training data or does not; "
                         "fix the labels or drop the duplicates")


def unknown_token_warnings(names, tokenizer) -> list[str]:
    """Warnings for names the tokenizer reads (partly) as its unknown token, one per entity type.

    A name made of ``[UNK]`` tokens gets the same confidence as any other such name in
    a prompt: the audit cannot tell them apart, and their M-MEM says nothing about
    memorization. Names are tokenized as text (special-token strings split, as the
    audit does) and never written into the message.

    Parameters
    ----------
    names : pandas.DataFrame
        ``name`` and ``entity_type`` columns (:func:`check_names_table`'s output).
    tokenizer : transformers tokenizer
        The NER model's tokenizer.

    Returns
    -------
    list of str
        Empty when no name holds the unknown token (or the tokenizer has none).
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or names.empty:
        return []
    ids = tokenizer(list(names["name"]), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    out = []
    for kind in dict.fromkeys(names["entity_type"]):
        rows = [i for i, t in enumerate(names["entity_type"]) if t == kind]
        some = [i for i in rows if unk in ids[i]]
        if some:
            only = sum(1 for i in some if set(ids[i]) == {unk})
            out.append(f"{len(some)} of {len(rows)} {kind} name(s) contain characters the tokenizer maps to "
                       f"{tokenizer.unk_token} ({only} consist of it alone): their confidences are read at the "
                       "unknown token, so such names look alike to the model and their M-MEM says little about "
                       "memorization; use a tokenizer that covers them or drop them")
    return out


def assign_split(names, *, dev_fraction: float = 0.5, seed: int = 0):
    """Add a seeded ``split`` column (dev/test), stratified by entity type and class.

    A table that already has ``split`` is returned unchanged. Each (type, class)
    cell sends ``round(dev_fraction * n)`` names to dev (at least one to each split
    when it holds two or more).

    Raises
    ------
    ValueError
        ``dev_fraction`` outside (0, 1).
    """
    if "split" in names.columns:
        return names
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    rng = np.random.default_rng(seed)
    split = np.empty(len(names), dtype=object)
    for _, idx in names.groupby(["entity_type", "is_member"], sort=True).indices.items():
        idx = np.asarray(idx)[rng.permutation(len(idx))]
        n_dev = int(round(dev_fraction * len(idx)))
        if len(idx) >= 2:
            n_dev = min(max(n_dev, 1), len(idx) - 1)
        split[idx[:n_dev]] = "dev"
        split[idx[n_dev:]] = "test"
    out = names.copy()
    out["split"] = split
    return out


def read_private_table(source, *, what: str = "names table"):
    """A DataFrame from a DataFrame or a .csv / .jsonl / .json / .parquet path, read in memory.

    Read with pandas rather than ``datasets.load_dataset``, whose builders write an
    Arrow copy of the file into the datasets cache: names are the sensitive data of
    this audit and must not be left on disk elsewhere.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing file or unsupported extension.
    """
    if isinstance(source, pd.DataFrame):
        return source.copy()
    if hasattr(source, "to_pandas"):
        return source.to_pandas()
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"{what} must be a pandas DataFrame or a file path, got {type(source).__name__}")
    path = os.fspath(source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what} file {path!r} does not exist")
    ext = path.rsplit(".", 1)[-1].lower()
    if ext == "csv":
        return pd.read_csv(path, keep_default_na=False)
    if ext in ("jsonl", "json"):
        return pd.read_json(path, lines=ext == "jsonl")
    if ext == "parquet":
        return pd.read_parquet(path)
    raise ValueError(f"{what} file {path!r}: use a .csv, .jsonl, .json or .parquet file")
