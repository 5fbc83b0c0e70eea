"""Audit inputs: reading tables, validating the pool and the population (mlflow_mia/data.py)."""

from __future__ import annotations

import pathlib

import pandas as pd
import pytest

from mlflow_mia.data import AuditDataset, PopulationSet, load_table

CANARY = "zq-canary-7f3c1e member text that must not persist"


def _files_containing(root: pathlib.Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_tables_do_not_persist_in_the_datasets_cache(ext, tmp_path, monkeypatch):
    cache = tmp_path / "hf_datasets_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    frame = pd.DataFrame({"text": [CANARY, "another text"], "is_member": [1, 0]})
    path = tmp_path / "data" / f"pool.{ext}"
    path.parent.mkdir()
    {"csv": lambda p: frame.to_csv(p, index=False), "jsonl": lambda p: frame.to_json(p, orient="records", lines=True),
     "parquet": lambda p: frame.to_parquet(p)}[ext](path)
    before = {str(p) for p in tmp_path.rglob("*")}
    table = load_table(path)
    assert table["text"].tolist() == [CANARY, "another text"] and table["is_member"].tolist() == [1, 0]
    written = [p for p in tmp_path.rglob("*") if str(p) not in before and p.is_file()]
    assert not [str(p) for p in written if CANARY.encode() in p.read_bytes()]
    assert not (cache.exists() and _files_containing(cache, CANARY))
    assert not _files_containing(tmp_path / "hf_home", CANARY) if (tmp_path / "hf_home").exists() else True


def test_same_text_labelled_member_and_non_member_names_the_rows():
    with pytest.raises(ValueError, match=r"1 text\(s\) are labelled both member and non-member.*rows \[0, 3\]"):
        AuditDataset(texts=["a cat", "a dog", "a hat", "a cat"], labels=[1, 0, 1, 0])
    # The same text twice with one label is a duplicate, not a contradiction.
    assert len(AuditDataset(texts=["a cat", "a dog", "a cat"], labels=[1, 0, 1])) == 3


@pytest.mark.parametrize("labels", [[1, "yes", 0], [1, "1", 0], [1, None, 0]])
def test_labels_mixing_numbers_and_strings_are_a_clear_value_error(labels):
    column = pd.DataFrame({"text": ["a cat", "a dog", "a hat"], "is_member": labels})
    with pytest.raises(ValueError, match=r"labels must be 1 \(member\) or 0 \(non-member\).*row 1.*map your column"):
        AuditDataset.from_frame(column)


def test_labels_of_object_dtype_holding_0_and_1_are_accepted():
    pool = AuditDataset(texts=["a cat", "a dog"], labels=pd.Series([1, 0], dtype=object).to_numpy())
    assert pool.labels.tolist() == [1, 0]


@pytest.mark.parametrize("content", ["", "text,is_member\n", "text,is_member\n\n"])
def test_an_empty_pool_file_gets_our_error(content, tmp_path):
    path = tmp_path / "pool.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match="the target pool file .* has no rows"):
        AuditDataset.from_frame(path)


@pytest.mark.parametrize("ext", ["jsonl", "json", "parquet"])
def test_an_empty_pool_file_in_each_format_has_no_rows(ext, tmp_path):
    path = tmp_path / f"pool.{ext}"
    if ext == "parquet":
        pd.DataFrame({"text": pd.Series([], dtype=str), "is_member": pd.Series([], dtype=int)}).to_parquet(path)
    else:
        path.write_text("" if ext == "jsonl" else "[]")
    with pytest.raises(ValueError, match="has no rows"):
        AuditDataset.from_frame(path)


def test_an_empty_pool_frame_is_refused():
    with pytest.raises(ValueError, match="the target pool is empty"):
        AuditDataset.from_frame(pd.DataFrame({"text": [], "is_member": []}))


@pytest.mark.parametrize("invisible", ["\u200b\u200b", "\x00", "\x00 \u200d\ufeff", "\u2060\t"])
def test_zero_width_or_nul_only_text_is_reported_at_its_row(invisible):
    with pytest.raises(ValueError, match=r"the target pool has 1 empty, whitespace-only or invisible .*row 2"):
        AuditDataset(texts=["a cat", "a dog", invisible, "a hat"], labels=[1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"the population set has 1 .*row 1"):
        PopulationSet(texts=["a cat", invisible])
    assert len(PopulationSet(texts=["a\u200bcat", "x\x00y"])) == 2  # visible characters around: kept


# Invisible-character variants of a member text (issue 21, medium): the model sees the same tokens.
MEMBER = "the cat sat on the mat"
INVISIBLE_VARIANTS = {
    "zero-width space": MEMBER.replace(" cat", " c\u200bat"),
    "soft hyphen": MEMBER.replace(" mat", " m\u00adat"),
    "word joiner": MEMBER.replace(" sat", " s\u2060at"),
    "zero-width joiner": MEMBER.replace(" on", " o\u200dn"),
    "byte-order mark": "\ufeff" + MEMBER,
    "no-break space": MEMBER.replace(" ", "\u00a0"),
    "combination": "\ufeff" + MEMBER.replace(" cat", " c\u200bat\u00ad").replace(" ", "\u00a0", 2) + "\u2060",
}


@pytest.mark.parametrize("kind", list(INVISIBLE_VARIANTS))
def test_invisible_character_variants_of_a_member_in_the_population_are_refused(kind):
    from mlflow_mia.audits.membership.checks import check_data
    from mlflow_mia.config import AuditConfig, MetricConfig
    from mlflow_mia.signals.testing import tiny_bert_tokenizer

    variant = INVISIBLE_VARIANTS[kind]
    assert variant != MEMBER
    tok = tiny_bert_tokenizer()
    assert tok(variant)["input_ids"] == tok(MEMBER)["input_ids"]  # why it matters: the same tokens
    pool = AuditDataset(texts=[MEMBER, "a dog ran"], labels=[1, 0])
    population = PopulationSet(texts=[variant] + [f"population text {i}" for i in range(20)])
    config = AuditConfig(attacks=("loss",), metrics=MetricConfig(fprs=(0.1,)))
    with pytest.raises(ValueError, match=r"1 population text\(s\) equal a pool text up to invisible characters"):
        check_data(pool, population, config)


# Issue 32, medium: default-ignorable code points and combining marks the round-two fold let through.
MARK_VARIANTS = {
    "combining grapheme joiner U+034F": MEMBER.replace(" cat", " c\u034fat"),
    "variation selector 16 U+FE0F": MEMBER.replace(" sat", " sat\ufe0f"),
    "variation selector 1 U+FE00": MEMBER.replace(" on", " o\ufe00n"),
    "combining acute U+0301 (composes with a vowel)": MEMBER.replace(" cat", " ca\u0301t"),
    "combining acute U+0301 (after a consonant)": MEMBER.replace(" mat", " mat\u0301"),
    "precomposed a-acute U+00E1": MEMBER.replace(" sat", " s\u00e1t"),
    "Khmer inherent vowel U+17B4": MEMBER.replace(" the", " the\u17b4"),
    "variation selector 17 U+E0100 and a tag character": MEMBER + "\U000e0100\U000e0041",
    "all of them": "\u034f" + MEMBER.replace(" cat", " ca\u0301t\ufe0f").replace(" on", " o\ufe00n\u17b4"),
}


@pytest.mark.parametrize("kind", list(MARK_VARIANTS))
def test_default_ignorable_and_combining_mark_variants_of_a_member_are_refused(kind):
    from mlflow_mia.audits.membership.checks import check_data
    from mlflow_mia.config import AuditConfig, MetricConfig
    from mlflow_mia.signals.testing import tiny_bert_tokenizer

    variant = MARK_VARIANTS[kind]
    assert variant != MEMBER
    tok = tiny_bert_tokenizer()
    assert tok(variant)["input_ids"] == tok(MEMBER)["input_ids"]  # the same tokens for an uncased BERT
    pool = AuditDataset(texts=[MEMBER, "a dog ran"], labels=[1, 0])
    population = PopulationSet(texts=[variant] + [f"population text {i}" for i in range(20)])
    config = AuditConfig(attacks=("loss",), metrics=MetricConfig(fprs=(0.1,)))
    with pytest.raises(ValueError, match=r"^1 population text\(s\) equal a pool text up to invisible characters "
                                         r"\(format characters .*default-ignorable code points .*combining marks "
                                         r"\(accents\), compatibility forms .*\(mlflow_mia.data.canonical_text\)"):
        check_data(pool, population, config)
    with pytest.raises(ValueError, match=r"1 text\(s\) are labelled both member and non-member"):
        AuditDataset(texts=[MEMBER, "a dog ran", variant], labels=[1, 0, 0])


def test_the_fold_drops_every_default_ignorable_code_point_and_mark():
    """canonical_text drops exactly: Default_Ignorable_Code_Point, categories Mn, Me and Cf (after NFKD)."""
    import sys
    import unicodedata

    from mlflow_mia.data import DEFAULT_IGNORABLE, canonical_text

    regex = pytest.importorskip("regex")
    ignorable = [c for c in range(sys.maxunicode + 1)
                 if regex.match(r"\p{Default_Ignorable_Code_Point}", chr(c))]
    assert ignorable == [c for lo, hi in DEFAULT_IGNORABLE for c in range(lo, hi + 1)]
    for code in ignorable:
        assert canonical_text(f"a{chr(code)}b") == "ab", hex(code)
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Mn", "Me", "Cf")]
    assert all(canonical_text(f"a{chr(c)}b") == "ab" for c in marks)
    # kept: letters with their case, digits, punctuation, symbols, visible spaces (as one)
    assert canonical_text("  Caf\u00e9,\u00a0\u00bd \u2460 \u00c5ngstr\u00f6m!\u3000") == "Cafe, 1\u20442 1 Angstrom!"


def test_texts_of_marks_and_ignorable_code_points_only_are_invisible():
    with pytest.raises(ValueError, match=r"the population set has 1 empty, whitespace-only or invisible text\(s\) "
                                         r"\(zero-width, format, combining, control or NUL characters only; first at "
                                         r"row 1\)"):
        PopulationSet(texts=["a cat", "\u034f\ufe0f\u0301 \U000e0100"])


@pytest.mark.parametrize("kind", list(INVISIBLE_VARIANTS))
def test_invisible_character_variants_labelled_both_ways_are_a_conflicting_label(kind):
    with pytest.raises(ValueError, match=r"1 text\(s\) are labelled both member and non-member.*rows \[0, 2\].*"
                                         "differ only in invisible characters"):
        AuditDataset(texts=[MEMBER, "a dog ran", INVISIBLE_VARIANTS[kind]], labels=[1, 0, 0])


def test_case_variants_still_only_warn():
    from mlflow_mia.audits.membership.checks import check_data
    from mlflow_mia.config import AuditConfig, MetricConfig

    pool = AuditDataset(texts=[MEMBER, "a dog ran"], labels=[1, 0])
    population = PopulationSet(texts=[MEMBER.upper()] + [f"population text {i}" for i in range(20)])
    notes = check_data(pool, population, AuditConfig(attacks=("loss",), metrics=MetricConfig(fprs=(0.1,))))
    assert notes and notes[0].startswith("1 population text(s) equal a pool text up to case or whitespace")


@pytest.mark.parametrize("cell", ["None", ""])
def test_a_missing_text_in_a_table_is_reported_as_missing_not_nan(cell, tmp_path):
    path = tmp_path / "pool.csv"
    path.write_text(f"text,is_member\na cat,1\n{cell},0\na dog,0\n")
    with pytest.raises(ValueError, match=r"the target pool has 1 missing text\(s\) \(an empty cell, None or NaN; "
                                         r"first at row 1\); drop those rows") as err:
        AuditDataset.from_frame(path)
    assert "nan" not in str(err.value)
    with pytest.raises(ValueError, match=r"the population set has 1 missing text\(s\)"):
        PopulationSet(texts=["a cat", None])


def test_a_lone_surrogate_is_reported_at_its_row(tmp_path):
    """An unpaired '\\ud800' is not text (no UTF-8): a file holding one is named with the parser's reason, and a
    text holding one (an object column, a list) with its row."""
    path = tmp_path / "pool.jsonl"
    path.write_text('{"text": "a cat", "is_member": 1}\n{"text": "a \\ud800dog", "is_member": 0}\n')
    with pytest.raises(ValueError, match=r"^the target pool file '.*pool.jsonl' cannot be read \(ArrowInvalid: JSON "
                                         r"parse error: The surrogate pair in string is invalid. in row 1\); check "
                                         r"its format and that it is valid UTF-8 text"):
        AuditDataset.from_frame(path)
    with pytest.raises(ValueError, match=r"^the target pool has 1 text\(s\) that are not valid Unicode: a lone "
                                         r"surrogate code point \(first at row 1, character 2: U\+D800\)"):
        AuditDataset(texts=["a cat", "a \ud800dog"], labels=[1, 0])
    with pytest.raises(ValueError, match=r"^the population set has 1 text\(s\) that are not valid Unicode"):
        PopulationSet(texts=["a cat", "\udfff"])


def test_reading_a_table_draws_no_datasets_bar_and_leaves_its_setting_as_it_was(tmp_path, capfd):
    from datasets.utils import logging as datasets_logging

    path = tmp_path / "t.csv"
    pd.DataFrame({"text": ["a b", "c d"], "is_member": [1, 0]}).to_csv(path, index=False)
    assert datasets_logging.is_progress_bar_enabled()
    assert load_table(str(path))["text"].tolist() == ["a b", "c d"]
    assert "Generating train split" not in capfd.readouterr().err
    assert datasets_logging.is_progress_bar_enabled()  # restored
