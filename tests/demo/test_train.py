"""Tests of mlflow_mia/demo/train.py's shared pieces: the masked-LM examples and the seeded initialisation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from mlflow_mia.demo.train import ModelSpec, TrainConfig, mlm_examples, new_model, seeded_model, train_tokenizer
from mlflow_mia.signals.testing import WORDS

SPEC = ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, vocab_size=120,
                 max_position_embeddings=16)


@pytest.fixture(scope="module")
def tokenizer():
    texts = [" ".join(WORDS[i:i + 6]) for i in range(0, len(WORDS) - 6)]
    return train_tokenizer(texts, vocab_size=SPEC.vocab_size, min_frequency=1, model_max_length=16)


def test_the_examples_are_the_truncated_encodings_with_their_special_token_masks(tokenizer):
    config = TrainConfig(max_length=5, mlm_probability=0.3, seed=7)
    texts = [" ".join(WORDS[:2]), " ".join(WORDS[:10])]
    examples, collator = mlm_examples(tokenizer, texts, config, caller="train_mlm")
    assert [e["input_ids"] for e in examples] == tokenizer(texts, truncation=True, max_length=5)["input_ids"]
    assert len(examples[1]["input_ids"]) == 5  # the long text is cut to 5 tokens
    for e in examples:  # [CLS] ... [SEP]: 1 on the special tokens only
        assert e["special_tokens_mask"] == [1] + [0] * (len(e["input_ids"]) - 2) + [1]
        assert e["input_ids"][0] == tokenizer.cls_token_id and e["input_ids"][-1] == tokenizer.sep_token_id
    assert collator.mlm_probability == 0.3 and collator.tokenizer is tokenizer


@pytest.mark.parametrize("caller", ["train_mlm", "train_mlm_dp"])
def test_no_texts_names_the_training_function(tokenizer, caller):
    with pytest.raises(ValueError, match=f"^{caller} needs at least one text$"):
        mlm_examples(tokenizer, [], TrainConfig(), caller=caller)


def test_a_tokenizer_without_a_mask_token_is_an_error():
    causal_style = SimpleNamespace(mask_token=None)  # checked before the tokenizer is called
    with pytest.raises(ValueError, match="^the tokenizer has no mask token; masked-LM training needs one$"):
        mlm_examples(causal_style, ["a b"], TrainConfig(), caller="train_mlm")


def test_the_seeded_initialisation_repeats_and_leaves_the_global_random_state_alone(tokenizer):
    state = torch.get_rng_state()
    a, b = new_model(tokenizer, SPEC, seed=3), new_model(tokenizer, SPEC, seed=3)
    c = new_model(tokenizer, SPEC, seed=4)
    assert torch.equal(state, torch.get_rng_state())
    weights = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(a.state_dict()[weights], b.state_dict()[weights])
    assert not torch.equal(a.state_dict()[weights], c.state_dict()[weights])
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        expected = BertForMaskedLM(config)  # what seeded_model must equal: the class built under manual_seed
    assert torch.equal(seeded_model(BertForMaskedLM, config, seed=3).state_dict()[weights],
                       expected.state_dict()[weights])
