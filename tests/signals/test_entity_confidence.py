import numpy as np
import pytest
import torch

from mlflow_mia.signals.entity_confidence import (ConfidenceCache, TokenClassifier, entity_confidence,
                                                  entity_tag_ids)

from mlflow_mia.signals.ner_testing import tiny_token_classifier


def _by_hand(model, tokenizer, words, name_words, b, i, subword):
    """C(e) from the model's logits, locating the name by word ids (an independent path)."""
    enc = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(model(**enc).logits[0], dim=-1).numpy()
    word_ids = enc.word_ids()
    picked = []
    for w in name_words:
        toks = [t for t, wid in enumerate(word_ids) if wid == w]
        picked.extend(toks[:1] if subword == "first" else toks)
    return float(np.mean([max(probs[t, b], probs[t, i]) for t in picked]))


@pytest.mark.parametrize("subword", ["first", "mean"])
def test_confidence_equals_hand_computation(tiny_ner, subword):
    model, tokenizer = tiny_ner
    clf = TokenClassifier(model, tokenizer)
    prompts = ["the cat sat on {name} .", "{name} ran to the bank", "good dog , {name} !"]
    names = ["red dogs", "ten", "blue cats mat"]
    got = entity_confidence(clf, prompts, names, ["PER", "LOC", "PER"], subword=subword, progress=False)
    b_per, i_per = model.config.label2id["B-PER"], model.config.label2id["I-PER"]
    b_loc, i_loc = model.config.label2id["B-LOC"], model.config.label2id["I-LOC"]
    want = [
        _by_hand(model, tokenizer, "the cat sat on red dogs .".split(), [4, 5], b_per, i_per, subword),
        _by_hand(model, tokenizer, "ten ran to the bank".split(), [0], b_loc, i_loc, subword),
        _by_hand(model, tokenizer, "good dog , blue cats mat !".split(), [3, 4, 5], b_per, i_per, subword),
    ]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_first_and_mean_differ_only_with_subwords(tiny_ner):
    clf = TokenClassifier(*tiny_ner)
    args = (["the {name} sat"] * 2, ["red dogs", "red dog"], ["PER", "PER"])
    first = entity_confidence(clf, *args, subword="first", progress=False)
    mean = entity_confidence(clf, *args, subword="mean", progress=False)
    assert first[1] == pytest.approx(mean[1])  # no subwords: same tokens
    assert first[0] != pytest.approx(mean[0])  # "dogs" = dog ##s


def test_tag_ids_read_from_shuffled_label2id():
    labels = ["B-company", "O", "I-person", "I-company", "B-person"]
    model, tokenizer = tiny_token_classifier(labels)
    assert entity_tag_ids(model.config.label2id, "person") == (4, 2)
    assert entity_tag_ids(model.config.label2id, "company") == (0, 3)
    # the same model with the label order reversed gives the same confidences once the head is permuted
    clf = TokenClassifier(model, tokenizer)
    a = entity_confidence(clf, ["the {name} sat"], ["red dog"], ["person"], progress=False)
    perm = list(reversed(range(len(labels))))
    model2, _ = tiny_token_classifier([labels[p] for p in perm])
    with torch.no_grad():
        model2.load_state_dict({k: v for k, v in model.state_dict().items()})
        model2.classifier.weight.copy_(model.classifier.weight[perm])
        model2.classifier.bias.copy_(model.classifier.bias[perm])
    b = entity_confidence(TokenClassifier(model2, tokenizer), ["the {name} sat"], ["red dog"], ["person"],
                          progress=False)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_missing_type_lists_tags(tiny_ner):
    clf = TokenClassifier(*tiny_ner)
    with pytest.raises(ValueError, match=r"no tag B-person; its entity types are \['LOC', 'PER'\]"):
        entity_confidence(clf, ["{name} sat"], ["red"], ["person"], progress=False)


def test_not_a_token_classifier():
    from mlflow_mia.signals.testing import tiny_bert

    with pytest.raises(ValueError, match="not a token-classification model"):
        TokenClassifier(*tiny_bert())


def test_bad_prompt_and_empty_name(tiny_ner):
    clf = TokenClassifier(*tiny_ner)
    with pytest.raises(ValueError, match="exactly one {name} slot, found 2"):
        entity_confidence(clf, ["{name} and {name}"], ["red"], ["PER"], progress=False)
    with pytest.raises(ValueError, match="empty names"):
        entity_confidence(clf, ["{name} sat"], ["  "], ["PER"], progress=False)
    with pytest.raises(ValueError, match=r"^name 1 \(1 in all\) is made only of invisible characters \(zero-width, "
                                         r"format or default-ignorable code points, combining marks\): it has no "
                                         r"letters for the model to tag; drop it$"):
        entity_confidence(clf, ["{name} sat"] * 2, ["red", "\u200b\u200b"], ["PER"] * 2, progress=False)


def test_batching_does_not_change_values(tiny_ner):
    clf = TokenClassifier(*tiny_ner)
    prompts = ["{name} sat", "the cat sat on the mat with {name} and the dog", "{name} !"] * 4
    names = ["red", "blue dog", "one two three"] * 4
    types = ["PER", "LOC", "PER"] * 4
    small = entity_confidence(clf, prompts, names, types, token_budget=8, progress=False)
    big = entity_confidence(clf, prompts, names, types, token_budget=4096, progress=False)
    np.testing.assert_allclose(small, big, rtol=1e-5, atol=1e-7)


def test_cache_hit_runs_no_forward_pass(tiny_ner, tmp_path):
    clf = TokenClassifier(*tiny_ner)
    cache = ConfidenceCache(tmp_path)
    calls = []
    # the encoder runs on either path (the full model, or every layer but the last in full: TokenClassifier.logits_at)
    clf.model.base_model.register_forward_pre_hook(lambda *a: calls.append(1))
    args = (["{name} sat", "the {name} ran"], ["red dog", "blue"], ["PER", "LOC"])
    first = entity_confidence(clf, *args, cache=cache, progress=False)
    assert calls and cache.count() == 2
    calls.clear()
    again = entity_confidence(clf, *args, cache=ConfidenceCache(tmp_path), progress=False)
    assert calls == []
    np.testing.assert_array_equal(first, again)
    # no raw name or prompt in the cache file
    raw = (tmp_path / "ner_confidence.sqlite").read_bytes()
    assert b"red dog" not in raw and b"the {name} ran" not in raw


def test_special_token_names_are_read_as_text(tiny_ner):
    """A name "[SEP]" is the five characters, as on the MLM path, not the tokenizer's separator."""
    clf = TokenClassifier(*tiny_ner)
    prompts = ["the cat sat on {name} ."] * 2
    as_text, spaced = entity_confidence(clf, prompts, ["[SEP]", "[ SEP ]"], ["PER", "PER"], subword="mean",
                                        progress=False)
    # split as text, "[SEP]" is the tokens "[", "SEP", "]": the same ids and positions as the spaced form
    # (read as the separator it would be one token of id sep_token_id, and its confidence another)
    assert as_text == pytest.approx(spaced, abs=1e-12)
    ids = clf.tokenizer("[SEP]", add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert len(ids) == 3 and clf.tokenizer.sep_token_id not in ids


def _batch(clf, prompts, names):
    from mlflow_mia.signals.batching import pad_batch
    from mlflow_mia.signals.entity_confidence import _encode

    ids, positions = _encode(clf, prompts, names, "mean")
    x, m = pad_batch(ids, clf.tokenizer.pad_token_id)
    rows = torch.tensor([r for r, pos in enumerate(positions) for _ in pos])
    cols = torch.tensor([c for pos in positions for c in pos])
    return torch.from_numpy(x), torch.from_numpy(m), rows, cols


def test_last_layer_and_head_run_only_at_the_name(tiny_ner):
    """BERT under a linear classifier: the logits at the name equal the full pass's, the last layer's
    feed-forward block and the classifier see only the name's tokens."""
    model, tokenizer = tiny_ner
    clf = TokenClassifier(model, tokenizer)
    x, m, rows, cols = _batch(clf, ["the cat sat on the mat with {name} and the dog", "{name} !"],
                              ["red dogs", "blue"])
    with torch.inference_mode():
        clf.logits_at(x, m, rows, cols)  # the first call checks the shortcut once on a random batch
    seen = []
    for module in (model.base_model.encoder.layer[-1].intermediate, model.classifier):
        module.register_forward_hook(lambda mod, args, out: seen.append((type(mod).__name__, args[0].shape)))
    with torch.inference_mode():
        got = clf.logits_at(x, m, rows, cols)
        seen_fast = list(seen)
        want = model(input_ids=x, attention_mask=m).logits[rows, cols]
    assert clf._fast is not False and clf._fast[1] is model.classifier
    assert len(rows) == 4 and x.shape[1] > 10  # "red dogs" = red dog ##s, "blue": 4 of 2 x 13 tokens
    assert seen_fast == [("BertIntermediate", torch.Size([4, 32])), ("Linear", torch.Size([4, 32]))]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_head_other_than_one_linear_layer_runs_the_full_model(tiny_ner):
    model, tokenizer = tiny_ner
    fast = entity_confidence(TokenClassifier(model, tokenizer), ["the {name} sat", "{name} !"], ["red dogs", "blue"],
                             ["PER", "LOC"], progress=False)
    import copy

    other = copy.deepcopy(model)
    other.classifier = torch.nn.Sequential(other.classifier)  # same logits, but not a Linear: no shortcut
    clf = TokenClassifier(other, tokenizer)
    full = entity_confidence(clf, ["the {name} sat", "{name} !"], ["red dogs", "blue"], ["PER", "LOC"],
                             progress=False)
    assert clf._fast is False
    np.testing.assert_allclose(fast, full, rtol=0, atol=1e-7)
