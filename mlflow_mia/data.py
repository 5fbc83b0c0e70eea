"""Audit inputs: the target pool (members and non-members) and the population set.

Validated once, here, at the boundary; everything downstream trusts these
objects. Label convention everywhere in mlflow-mia: ``1 = member`` (in the
target model's training data), ``0 = non-member``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
import os
import unicodedata
from dataclasses import dataclass
from typing import Sequence
import tempfile

import numpy as np
import pandas as pd

from mlflow_mia.naming import did_you_mean
from mlflow_mia.option import OptionError
from mlflow_mia.progress import library_bars_off

__all__ = ["AuditDataset", "PopulationSet", "text_hash", "load_table", "near_duplicates", "canonical_text",
           "invisible_variants", "surrogate_at"]


def text_hash(text: str) -> str:
    """Hex sha256 of the UTF-8 text: the identity of a sample in caches and artifacts."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Ranges of the Unicode property Default_Ignorable_Code_Point (Unicode's ``DerivedCoreProperties.txt``;
#: :mod:`unicodedata` does not expose it, and ``tests/test_data.py`` compares these ranges with the ``regex``
#: module's ``\p{Default_Ignorable_Code_Point}``): soft hyphen, combining grapheme joiner U+034F, Arabic letter mark,
#: Hangul fillers, Khmer inherent vowels U+17B4-U+17B5, Mongolian free variation selectors, zero-width space /
#: joiners and direction marks U+200B-U+200F, bidi embeddings U+202A-U+202E, word joiner and invisible
#: operators U+2060-U+206F, variation selectors U+FE00-U+FE0F and U+E0100-U+E01EF, byte-order mark U+FEFF,
#: shorthand format controls, musical beam symbols, tag characters U+E0000-U+E0FFF.
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
_IGNORABLE = frozenset(c for lo, hi in DEFAULT_IGNORABLE for c in range(lo, hi + 1))
#: Unicode general categories dropped by :func:`canonical_text`: nonspacing and enclosing marks, format characters.
FOLDED_CATEGORIES = ("Mn", "Me", "Cf")


@functools.lru_cache(maxsize=4096)
def _folded(char: str) -> bool:
    """True for a character :func:`canonical_text` drops (see there)."""
    return ord(char) in _IGNORABLE or unicodedata.category(char) in FOLDED_CATEGORIES


def canonical_text(text: str) -> str:
    """``text`` as a tokenizer may read it: what draws nothing or only marks a letter is folded away.

    The fold, in order:

    1. NFKD: compatibility forms become their plain letters (``\ufb01`` -> ``fi``, a full-width
       ``\uff41`` -> ``a``, a no-break space -> a space) and precomposed letters split into a base
       letter and combining marks (``\u00e9`` -> ``e`` + U+0301);
    2. every character of category Mn (nonspacing marks: accents, U+0301, U+034F, variation
       selectors U+FE00-U+FE0F, Khmer U+17B4), Me (enclosing marks) or Cf (format characters:
       zero-width space U+200B, joiners, word joiner U+2060, byte-order mark U+FEFF, soft hyphen,
       direction marks) is dropped, and so is every Unicode Default_Ignorable_Code_Point
       (:data:`DEFAULT_IGNORABLE`, which also holds the Hangul fillers and the unassigned
       ignorable ranges);
    3. NFC of what is left, and every run of whitespace becomes one space (leading and trailing
       whitespace dropped).

    Letters, digits, punctuation, symbols, case and the order of characters are kept: case is
    compared only by the near-duplicate warning (:func:`near_duplicates`). The model sees the
    same tokens for many pairs this folds together (an uncased BERT tokenizer strips accents,
    drops format characters and splits on every space), and the rest are the same text to a
    reader; so the pool/population overlap check and the conflicting-label check compare texts
    by this fold.

    >>> canonical_text("the\u200b cat\u00ad\u00a0sat\ufeff") == canonical_text("the cat sat")
    True
    >>> canonical_text("cafe\u0301 \u034fnai\ufe0fve\u17b4") == canonical_text("caf\u00e9  naive")
    True
    >>> canonical_text("\ufb01ne \uff21")
    'fine A'
    """
    text = unicodedata.normalize("NFKD", text)
    if not text.isascii():
        text = "".join(c for c in text if c.isascii() or not _folded(c))
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def invisible_variants(pool_texts: Sequence[str], population_texts: Sequence[str]) -> int:
    """How many population texts equal a pool text up to :func:`canonical_text` (invisible characters, combining
    marks, compatibility forms and whitespace), but not exactly."""
    exact = set(pool_texts)
    pool = {canonical_text(t) for t in pool_texts}
    return sum(1 for t in population_texts if t not in exact and canonical_text(t) in pool)


def near_duplicates(pool_texts: Sequence[str], population_texts: Sequence[str]) -> int:
    """How many population texts equal a pool text up to case, whitespace and invisible characters, but not exactly.

    ``"The Cat sat"`` and ``" the cat  sat"`` are the same record to a reader; an exact
    match, and one up to invisible characters only (:func:`invisible_variants`), are
    checked (and refused) elsewhere.
    """
    def norm(t: str) -> str:
        return canonical_text(t).casefold()

    exact = set(pool_texts)
    pool = {norm(t) for t in pool_texts}
    return sum(1 for t in population_texts if t not in exact and norm(t) in pool)


def _check_texts(texts: Sequence, what: str) -> tuple[str, ...]:
    texts = tuple(texts)
    if not texts:
        raise ValueError(f"{what} is empty: give at least one text")
    missing = [i for i, t in enumerate(texts) if _is_missing(t)]
    if missing:
        raise ValueError(
            f"{what} has {len(missing)} missing text(s) (an empty cell, None or NaN; first at row {missing[0]}); "
            "drop those rows or fill in their texts"
        )
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"{what} has {len(bad)} non-string text(s) (first at row {bad[0]}: {texts[bad[0]]!r}); "
            "convert the column to str"
        )
    broken = [(i, j) for i, j in ((i, surrogate_at(t)) for i, t in enumerate(texts)) if j is not None]
    if broken:
        i, j = broken[0]
        raise ValueError(
            f"{what} has {len(broken)} text(s) that are not valid Unicode: a lone surrogate code point (first at "
            f"row {i}, character {j}: U+{ord(texts[i][j]):04X}), as a JSON escape such as '\\ud800' without its "
            "pair gives; fix the file's encoding or drop those rows")
    blank = [i for i, t in enumerate(texts) if not _visible(t)]
    if blank:
        raise ValueError(
            f"{what} has {len(blank)} empty, whitespace-only or invisible text(s) (zero-width, format, combining, "
            f"control or NUL characters only; first at row {blank[0]}); remove them before the audit: they have no "
            "tokens to score"
        )
    return texts


def surrogate_at(text: str) -> int | None:
    """Index of the first lone surrogate (U+D800-U+DFFF) in ``text``, or None when it encodes as UTF-8.

    Python keeps such code points (``json.loads('"\\ud800"')``), but they are not text: no
    UTF-8 encoding, so no hash and no tokens.

    >>> surrogate_at("a cat"), surrogate_at("a " + chr(0xD800) + "cat")
    (None, 2)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _is_missing(value) -> bool:
    """None, NaN or pandas' NA/NaT: what a table reader makes of an empty cell."""
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


# Unicode categories that carry no visible text: separators (Z*), controls such as NUL (Cc),
# format characters such as zero-width spaces and joiners (Cf).
_INVISIBLE = {"Zs", "Zl", "Zp", "Cc", "Cf"}


def _visible(text: str) -> bool:
    """True when ``text`` holds a character that is not whitespace, a control, or dropped by :func:`canonical_text`
    (format characters, combining marks, default-ignorable code points)."""
    return any(not c.isspace() and unicodedata.category(c) not in _INVISIBLE for c in canonical_text(text))


def _check_labels(labels, n: int) -> np.ndarray:
    """Labels as a read-only int8 array of 0/1; a clear error naming the first bad row otherwise."""
    raw = np.asarray(labels)
    if raw.shape != (n,):
        raise ValueError(f"labels has shape {raw.shape}, expected ({n},) to match the texts")

    def ok(v) -> bool:  # 0/1 as int, float or bool; not "1", "yes", None or NaN
        return isinstance(v, (numbers.Number, np.bool_)) and not isinstance(v, complex) and v in (0, 1)

    values = raw.tolist()
    bad = [i for i, v in enumerate(values) if not ok(v)]
    if bad:
        seen = list(dict.fromkeys(repr(values[i]) for i in bad))
        raise ValueError(
            f"labels must be 1 (member) or 0 (non-member): {len(bad)} row(s) hold other values {seen[:5]} "
            f"(first at row {bad[0]}); map your column to 1/0 before the audit (e.g. "
            "df['is_member'] = df['is_member'].map({'yes': 1, 'no': 0})) and drop rows without a label")
    out = np.array([int(v) for v in values], dtype=np.int8)
    out.setflags(write=False)
    return out


def _conflicting_labels(texts: Sequence[str], labels: np.ndarray) -> list[list[int]]:
    """Rows of each text that appears both as a member and as a non-member (up to :func:`canonical_text`)."""
    rows: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        rows.setdefault(canonical_text(t), []).append(i)
    return [r for r in rows.values() if len(r) > 1 and len({int(labels[i]) for i in r}) > 1]


def load_table(source, *, what: str = "data"):
    """Load a table from a pandas DataFrame or a csv / jsonl / json / parquet path.

    Files are read with Hugging Face ``datasets`` and returned as a pandas DataFrame.
    Nothing of the table persists on disk: ``datasets`` prepares its Arrow files in a
    temporary cache directory that is removed once the table is in memory (its default
    cache, ``~/.cache/huggingface/datasets``, would keep the raw pool texts).

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    ValueError
        The file extension is not one of csv, json, jsonl, parquet; the file has no
        rows (empty, a header only, ``[]``), checked before ``datasets`` reads it; the
        file cannot be parsed (invalid JSON or UTF-8, a lone surrogate), with the reason.
    """
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{what} file {path!r} does not exist")
        ext = path.rsplit(".", 1)[-1].lower()
        builder = {"csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet"}.get(ext)
        if builder is None:
            raise ValueError(f"{what} file {path!r}: use a .csv, .jsonl, .json or .parquet file")
        if _row_free(path, builder):
            raise ValueError(f"{what} file {path!r} has no rows: it needs a header and at least one text")
        return _read_in_memory(builder, path, what)
    if hasattr(source, "to_pandas"):  # datasets.Dataset, mlflow EvaluationDataset
        return source.to_pandas()
    raise TypeError(f"{what} must be a pandas DataFrame or a file path, got {type(source).__name__}")


def _row_free(path: str, builder: str) -> bool:
    """True when a table file holds no data rows (empty, a csv header alone, ``[]``, a 0-row parquet)."""
    if os.path.getsize(path) == 0:
        return True
    if builder == "parquet":
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows == 0
    with open(path, "rb") as fh:
        lines = 0
        for line in fh:
            if line.strip():
                lines += 1
                if lines == 2:
                    return False
    if builder == "csv":
        return True  # a header alone, or nothing
    if lines == 0:
        return True
    with open(path, "rb") as fh:  # one line of json: [] or a single record
        return fh.read(64).strip() in (b"[]", b"{}")


def _read_in_memory(builder: str, path: str, what: str = "data"):
    """``load_dataset(builder, data_files=path)`` as a DataFrame, with no cache left behind.

    Raises
    ------
    ValueError
        The file cannot be parsed (invalid JSON or UTF-8, a lone surrogate, a damaged parquet file), with the
        file and the parser's reason.
    """
    from datasets import load_dataset
    from datasets.exceptions import DatasetsError

    with tempfile.TemporaryDirectory(prefix="mlflow_mia_table_") as tmp, library_bars_off():
        try:
            dataset = load_dataset(builder, data_files=path, split="train", cache_dir=tmp, keep_in_memory=True)
        except DatasetsError as exc:  # "An error occurred while generating the dataset": the cause says what
            cause = exc.__cause__ or exc.__context__ or exc
            raise ValueError(f"{what} file {path!r} cannot be read ({type(cause).__name__}: {cause}); check its "
                             "format and that it is valid UTF-8 text (a lone surrogate such as the JSON escape "
                             "'\\ud800' without its pair is not)") from None
        return dataset.to_pandas()


def _column(df, name: str, what: str, key: str):
    """``df[name]``; an :class:`~mlflow_mia.option.OptionError` naming the option ``key`` when there is no such column."""
    columns = [str(c) for c in df.columns]
    if name in df.columns:
        return df[name]
    raise OptionError(f"{what} has no column {name!r}{did_you_mean(name, columns)}; its columns are {columns}: "
                      "name the right column with {option}", key)


def _text_column(df, name: str, what: str, key: str):
    """The text column ``name`` of ``df``: present, and its values strings (else the column and option are named)."""
    texts = _column(df, name, what, key)
    bad = [i for i, t in enumerate(texts.tolist()) if not isinstance(t, str) and not _is_missing(t)]
    if bad:
        raise OptionError(f"{what}'s text column {name!r} has {len(bad)} non-string value(s) (first at row {bad[0]}: "
                          f"{texts.tolist()[bad[0]]!r}): name the text column with {{option}}, or convert it to str",
                          key)
    return texts


class _Texts:
    """What the pool and the population set share: their size and the texts' sha256 (:func:`text_hash`)."""
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def text_hashes(self) -> tuple[str, ...]:
        return tuple(text_hash(t) for t in self.texts)


@dataclass(frozen=True)
class AuditDataset(_Texts):
    """The target pool: samples whose membership the attack must decide.

    Attributes
    ----------
    texts : tuple of str, length n_samples
    labels : ndarray of shape (n_samples,), dtype int8
        1 = member of the target model's training data, 0 = non-member.
    sample_ids : tuple of str, length n_samples
        Stable identifiers written to artifacts instead of raw text.
    groups : tuple of str or None
        User / patient / document id of each sample, for user-level results.

    Raises
    ------
    ValueError
        An empty pool; texts holding a lone surrogate (not valid Unicode); empty, blank or
        invisible texts (zero-width, format, combining, control or NUL characters only);
        labels other than 0/1 (NaN, None, ``"yes"``, ``"1"``); the same text (up to
        :func:`canonical_text`: invisible characters, combining marks, compatibility forms
        and whitespace) labelled both member and non-member; length mismatches; duplicate sample
        ids; a group containing both members and non-members. Each names the first row.
    """

    texts: tuple[str, ...]
    labels: np.ndarray
    sample_ids: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None

    def __post_init__(self):
        texts = _check_texts(self.texts, "the target pool")
        object.__setattr__(self, "texts", texts)
        labels = _check_labels(self.labels, len(texts))
        conflicts = _conflicting_labels(texts, labels)
        if conflicts:
            raise ValueError(
                f"{len(conflicts)} text(s) are labelled both member and non-member (first: rows {conflicts[0][:5]}); "
                "a text either was in the training data or was not: fix the labels or drop the duplicates (texts "
                "that differ only in invisible characters, combining marks, compatibility forms or whitespace "
                "count as one, mlflow_mia.data.canonical_text: the model sees the same tokens)")
        object.__setattr__(self, "labels", labels)
        ids = self.sample_ids
        if ids is None:
            ids = tuple(str(i) for i in range(len(texts)))
        ids = tuple(str(i) for i in ids)
        if len(ids) != len(texts):
            raise ValueError(f"sample_ids has {len(ids)} entries, expected {len(texts)}")
        if len(set(ids)) != len(ids):
            raise ValueError("sample_ids must be unique")
        object.__setattr__(self, "sample_ids", ids)
        if self.groups is not None:
            groups = tuple(self.groups)
            if len(groups) != len(texts):
                raise ValueError(f"groups has {len(groups)} entries, expected {len(texts)}")
            if any(g is None or (isinstance(g, float) and math.isnan(g)) for g in groups):
                raise ValueError("groups contain missing values; every sample needs a group id")
            groups = tuple(str(g) for g in groups)
            mixed = _mixed_groups(groups, labels)
            if mixed:
                raise ValueError(f"{len(mixed)} group(s) contain both members and non-members (e.g. {mixed[0]!r}); "
                                 "a user is a member when all of their samples are")
            object.__setattr__(self, "groups", groups)

    @classmethod
    def from_frame(cls, data, *, text_column: str = "text", label_column: str = "is_member",
                   id_column: str | None = None, group_column: str | None = None) -> "AuditDataset":
        """Build the pool from a DataFrame or file (see :func:`load_table`)."""
        df = load_table(data, what="the target pool")
        texts = _text_column(df, text_column, "the target pool", "text_column")
        labels = _column(df, label_column, "the target pool", "label_column")
        ids = _column(df, id_column, "the target pool", "id_column").tolist() if id_column else None
        groups = _column(df, group_column, "the target pool", "group_column").tolist() if group_column else None
        return cls(texts=tuple(texts.tolist()), labels=labels.to_numpy(), sample_ids=ids, groups=groups)


def _mixed_groups(groups: Sequence[str], labels: np.ndarray) -> list[str]:
    _, inverse = np.unique(np.asarray(groups, dtype=object), return_inverse=True)
    lo, hi = np.full(inverse.max() + 1, 2, dtype=np.int8), np.full(inverse.max() + 1, -1, dtype=np.int8)
    np.minimum.at(lo, inverse, labels)
    np.maximum.at(hi, inverse, labels)
    bad = set(np.flatnonzero(lo != hi).tolist())
    return sorted({g for g, k in zip(groups, inverse) if k in bad})


@dataclass(frozen=True)
class PopulationSet(_Texts):
    """Samples from the general population, disjoint from the target pool.

    Only used to choose thresholds: the ``1 - alpha`` quantile of the attack
    score over these samples (Mireshghallah et al. 2022, Sec. 2.4, Fig. 2a).

    Attributes
    ----------
    texts : tuple of str, length n_population
    groups : tuple of str or None
        User / document id of each sample; with it, user-level thresholds come from
        the population's user scores (mean of each user's sample scores).
    """

    texts: tuple[str, ...]
    groups: tuple[str, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "texts", _check_texts(self.texts, "the population set"))
        if self.groups is not None:
            groups = tuple(str(g) for g in self.groups)
            if len(groups) != len(self.texts):
                raise ValueError(f"population groups has {len(groups)} entries, expected {len(self.texts)}")
            object.__setattr__(self, "groups", groups)

    @classmethod
    def from_frame(cls, data, *, text_column: str = "text", group_column: str | None = None,
                   text_key: str = "population_text_column", group_key: str | None = None) -> "PopulationSet":
        """The population from a DataFrame or file; ``text_key`` is the option named in errors. ``group_column`` is
        used where the table has it; with ``group_key`` it must exist (an OptionError names that option)."""
        df = load_table(data, what="the population set")
        if group_column and group_key:
            _column(df, group_column, "the population set", group_key)
        groups = df[group_column].tolist() if group_column and group_column in df.columns else None
        return cls(texts=tuple(_text_column(df, text_column, "the population set", text_key).tolist()), groups=groups)
