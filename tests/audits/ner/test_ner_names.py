import pandas as pd
import pytest

from mlflow_mia.audits.ner.names import (assign_split, check_names_table, detection_set, extract_entities, name_hash,
                                  read_conll)
from mlflow_mia.audits.ner.prompts import check_prompts, load_prompts, slot_position


def test_read_conll_with_tab_blank_lines(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("Ann\tB-PER\nLee\tI-PER\nin\tO\n\t\nParis\tB-LOC\n!\tO\n")
    assert read_conll(p) == [{"tokens": ["Ann", "Lee", "in"], "tags": ["B-PER", "I-PER", "O"]},
                             {"tokens": ["Paris", "!"], "tags": ["B-LOC", "O"]}]
    bad = tmp_path / "bad.txt"
    bad.write_text("Ann\n")
    with pytest.raises(ValueError, match="bad.txt:1"):
        read_conll(bad)


def test_extract_entities_bio_rules():
    assert extract_entities(["a", "b", "c", "d"], ["I-X", "I-X", "B-X", "I-Y"]) == [("X", "a b"), ("X", "c"),
                                                                                  ("Y", "d")]


def _corpus(names, kind="PER"):
    return [{"tokens": n.split() + ["ran"], "tags": ["B-" + kind] + ["I-" + kind] * (len(n.split()) - 1) + ["O"]}
            for n in names]


def test_detection_set_case_insensitive_exclusive_balanced():
    train = _corpus(["Ann Lee", "bob", "Cy", "Dee", "ann lee"])
    other = _corpus(["ANN LEE", "Eve", "Fay", "Gus", "Hal", "Ike"])
    d = detection_set(train, other, seed=3)
    ins = d[d.is_member == 1]
    outs = d[d.is_member == 0]
    assert len(ins) == len(outs) == 4  # ann lee de-duplicated; balanced to the 4 in-sample names
    assert "ANN LEE" not in set(outs.name) and not {n.lower() for n in outs.name} & {n.lower() for n in ins.name}
    assert set(d.split) == {"dev", "test"} and (d.groupby(["is_member", "split"]).size() == 2).all()
    again = detection_set(train, other, seed=3)
    pd.testing.assert_frame_equal(d, again)


def test_detection_set_missing_type_is_an_error():
    with pytest.raises(ValueError, match="too few names"):
        detection_set(_corpus(["a"]), _corpus(["b"]), entity_types=["LOC"])


def test_names_table_errors():
    ok = pd.DataFrame({"name": ["a", "b"], "entity_type": ["PER", "PER"], "is_member": [1, 0]})
    with pytest.raises(ValueError, match="lacks column"):
        check_names_table(ok.drop(columns="is_member"))
    with pytest.raises(ValueError, match="one class only"):
        check_names_table(ok.assign(is_member=[1, 1]))
    with pytest.raises(ValueError, match=r"entity type\(s\) \['LOC'\] not in the names table"):
        check_names_table(ok, entity_types=["LOC"])
    with pytest.raises(ValueError, match="empty or non-string name"):
        check_names_table(ok.assign(name=["a", " "]))
    with pytest.raises(ValueError, match="is empty"):
        check_names_table(ok.iloc[:0])
    with pytest.raises(ValueError, match="must hold 0/1"):
        check_names_table(ok.assign(is_member=[1, 2]))


def test_assign_split_stratified():
    df = pd.DataFrame({"name": list("abcdefgh"), "entity_type": "PER", "is_member": [1, 1, 1, 1, 0, 0, 0, 0]})
    s = assign_split(df, dev_fraction=0.5, seed=0)
    assert (s.groupby(["is_member", "split"]).size() == 2).all()


def test_shipped_prompts_cover_types_sentences_and_positions():
    p = load_prompts()
    for kind, g in p.groupby("entity_type"):
        assert len(g) >= 100, kind
        assert set(g.sentence_type) == {"declarative", "exclamatory", "imperative", "interrogative"}
        assert set(g.slot_position) == {"start", "middle", "end"}
        assert g.n_words.min() <= 3 and g.n_words.max() >= 9  # short and long
    hand = load_prompts(kind="handwritten")
    assert (hand.groupby("entity_type").size() == 5).all()
    assert set(hand.entity_type) == set(p.entity_type)


def test_prompt_validation():
    with pytest.raises(ValueError, match=r"1 prompt\(s\) do not hold exactly one \{name\} slot"):
        check_prompts(pd.DataFrame({"prompt": ["hi {name}", "no slot"], "entity_type": ["PER", "PER"]}))
    with pytest.raises(ValueError, match=r"no prompt for entity type\(s\) \['LOC'\]"):
        check_prompts(pd.DataFrame({"prompt": ["hi {name}"], "entity_type": ["PER"]}), entity_types=["LOC"])
    got = check_prompts(pd.DataFrame({"prompt": ["MASK is here"], "entity_type": ["PER"]}))
    assert got.prompt[0] == "{name} is here" and got.slot_position[0] == "start"
    assert slot_position("Is {name}'s dog here?") == "middle"


def test_name_hash_normalises_and_is_keyed():
    import hashlib

    key = "k1-a-key-of-thirty-two-bytes-or-more"
    assert name_hash("Ann  Lee", key) == name_hash("ann lee", key) != name_hash("ann le", key)
    assert name_hash("ann lee", b"k1") != name_hash("ann lee", b"k2")
    assert name_hash("ann lee", key) != hashlib.sha256(b"ann lee").hexdigest()[:16]  # not an unkeyed hash
    assert name_hash("Ann Lee", key) == name_hash("ann lee", key.encode())
    from mlflow_mia import lookup_hash  # the scheme of every logged hash, truncated

    assert name_hash("Ann  Lee", key) == lookup_hash("ann lee", key)[:16]


def test_detection_set_exclusive_drops_shared_names():
    train = _corpus(["Ann Lee", "Bob", "Cy"])
    other = _corpus(["ann lee", "Eve", "Fay", "Gus"])
    d = detection_set(train, other, exclusive=True, seed=0)
    assert set(d[d.is_member == 1].name) == {"Bob", "Cy"}
    assert len(d[d.is_member == 0]) == 2 and "ann lee" not in set(d.name)
    assert "Ann Lee" in set(detection_set(train, other, seed=0).query("is_member == 1").name)


def test_a_name_labelled_both_in_and_out_of_sample_is_an_error():
    names = pd.DataFrame({"name": ["Ann Lee", "Bo Chen", "ann  lee", "Cy Dee"], "entity_type": "PER",
                          "is_member": [1, 0, 0, 1]})
    with pytest.raises(ValueError, match=r"1 name\(s\) are labelled both in-sample and out-of-sample in "
                                         r"'is_member' within one entity type \(first: rows \[0, 2\]"):
        check_names_table(names)
    with pytest.raises(ValueError, match=r"rows \[0, 2\]"):  # an invisible character does not make it another name
        check_names_table(names.assign(name=["Ann Lee", "Bo Chen", "Ann\u200b Lee", "Cy Dee"]))
    # The same name in two types may differ (a person and a place), and a repeated label is no conflict.
    ok = pd.concat([names.iloc[[0, 1, 3]], pd.DataFrame({"name": ["Ann Lee", "Ed Fox", "Ann Lee"],
                                                         "entity_type": ["LOC", "LOC", "PER"],
                                                         "is_member": [0, 1, 1]})], ignore_index=True)
    assert len(check_names_table(ok)) == 6


def test_names_that_tokenize_to_unk_get_a_warning(caplog):
    from mlflow_mia.audits.ner.names import unknown_token_warnings
    from mlflow_mia.signals.testing import tiny_bert_tokenizer

    tok = tiny_bert_tokenizer()  # word-level: a word outside its vocabulary is [UNK]
    names = pd.DataFrame({"name": ["the cat", "zyxw qqq", "cat qqq", "red dog", "the mat"],
                          "entity_type": ["PER", "PER", "PER", "LOC", "LOC"], "is_member": [1, 0, 1, 0, 1]})
    warnings = unknown_token_warnings(names, tok)
    assert warnings == [f"2 of 3 PER name(s) contain characters the tokenizer maps to [UNK] (1 consist of it "
                        "alone): their confidences are read at the unknown token, so such names look alike to the "
                        "model and their M-MEM says little about memorization; use a tokenizer that covers them or "
                        "drop them"]
    assert not any(n in warnings[0] for n in names.name)  # names never reach a message
    assert unknown_token_warnings(names.iloc[[0, 3]], tok) == []


@pytest.mark.parametrize("name", ["\u200b\u200b", "\u200d\ufeff \u2060", "\u034f\ufe0f", "\u0301"])
def test_a_name_of_invisible_characters_only_gets_its_own_message(name):
    """Not blamed on truncation: the table check names the row and says why (issue 32, low)."""
    table = pd.DataFrame({"name": ["a", "b", name], "entity_type": ["PER"] * 3, "is_member": [1, 0, 0]})
    with pytest.raises(ValueError, match=r"^the names table has 1 name\(s\) made only of invisible characters "
                                         r"\(zero-width, format or default-ignorable code points, combining marks; "
                                         r"first at row 2\): they have no letters for the model to tag; drop them$"):
        check_names_table(table)


def test_a_name_with_a_lone_surrogate_is_refused_with_its_row():
    table = pd.DataFrame({"name": pd.Series(["a", "b\ud800"], dtype=object), "entity_type": ["PER"] * 2,
                          "is_member": [1, 0]})
    with pytest.raises(ValueError, match=r"^the names table has 1 name\(s\) that are not valid Unicode: a lone "
                                         r"surrogate \(first at row 1, character 1\)"):
        check_names_table(table)
