"""The model families reviewers release, each a tiny random-weight config built here, against brute-force loops.

Causal: Llama, Mistral, Qwen2, Phi-3, Gemma-2 (rotary, grouped-query attention, no pad token in the tokenizer, a BOS
added by the tokenizer or not). Masked: BERT, RoBERTa, DeBERTa-v2, ELECTRA generator, ModernBERT; token
classification (the NER audit) on the same encoders.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import CausalLM, MaskedLM, compute_signals
from mlflow_mia.signals.testing import WORDS, tiny_bert_tokenizer

TEXTS = ["the cat sat on the mat", "a dog ran to the old house and sat down", "we saw the sea"]


def _llama_tokenizer(*, bos: bool):
    """Word-level, Llama's manner: ``<s>`` added in front of every text when ``bos``, no pad token."""
    words = sorted({w.lower() for w in WORDS if w.isalpha()})
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *words])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=64)


def _causal(family: str, tokenizer):
    import transformers

    torch.manual_seed(0)
    common = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": None}
    extra = {"Gemma2": {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 16},
             "Mistral": {"sliding_window": 16}, "Phi3": {"original_max_position_embeddings": 64}}.get(family, {})
    config = getattr(transformers, f"{family}Config")(**common, **extra)
    return getattr(transformers, f"{family}ForCausalLM")(config).eval()


def _brute_causal(model, tokenizer, text) -> float:
    """Mean NLL of tokens 2..n of the text as the tokenizer encodes it, one unbatched pass, float64 softmax."""
    ids = tokenizer(text)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
    return -float(logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).mean())


@pytest.mark.parametrize("family", ["Llama", "Mistral", "Qwen2", "Phi3", "Gemma2"])
@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_causal_families_equal_a_per_text_loop(family, bos):
    tokenizer = _llama_tokenizer(bos=bos)
    assert tokenizer.pad_token is None  # padding uses the end-of-text id, masked out (CausalLM.pad_id)
    lm = CausalLM(_causal(family, tokenizer), tokenizer)
    res = compute_signals(lm, TEXTS, SignalConfig(kind="causal"), progress=False)
    expected = [_brute_causal(lm.model, tokenizer, t) for t in TEXTS]
    np.testing.assert_allclose(res.values, expected, rtol=2e-5)
    first = tokenizer(TEXTS[0])["input_ids"]
    assert (first[0] == tokenizer.bos_token_id) == bos  # the BOS is the tokenizer's choice, scored from it
    assert len(res.token_logprobs[0]) == len(first) - 1


def test_a_text_longer_than_the_context_is_truncated_loudly_not_silently(caplog):
    """The documented choice: scored on its first max_length tokens, warned, counted (n_truncated, report)."""
    import logging

    tokenizer = _llama_tokenizer(bos=True)
    lm = CausalLM(_causal("Llama", tokenizer), tokenizer)
    long_text = " ".join(["the cat sat on the mat"] * 20)  # 120 words > 64 positions
    caplog.set_level(logging.WARNING)
    res = compute_signals(lm, [long_text, TEXTS[0]], SignalConfig(kind="causal", max_length=64), progress=False)
    assert list(res.truncated) == [True, False]
    assert "1 of 2 texts are longer than 64 tokens and are truncated to their first 64 tokens" in caplog.text


def _masked(family: str, tokenizer):
    import transformers

    torch.manual_seed(0)
    common = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "max_position_embeddings": 64, "pad_token_id": tokenizer.pad_token_id}
    extra = {"Electra": {"embedding_size": 16},
             "ModernBert": {"global_attn_every_n_layers": 1, "local_attention": 16,
                            "bos_token_id": tokenizer.cls_token_id, "eos_token_id": tokenizer.sep_token_id,
                            "cls_token_id": tokenizer.cls_token_id, "sep_token_id": tokenizer.sep_token_id}
             }.get(family, {})
    config = getattr(transformers, f"{family}Config")(**common, **extra)
    return getattr(transformers, f"{family}ForMaskedLM")(config).eval()


def _brute_pll(lm, text) -> float:
    """Mean NLL of each non-special token with it alone masked, one unbatched pass each, full head."""
    enc = lm.tokenizer(text, return_special_tokens_mask=True)
    ids = torch.tensor([enc["input_ids"]])
    out = []
    for p in np.flatnonzero(~np.asarray(enc["special_tokens_mask"], dtype=bool)):
        masked = ids.clone()
        masked[0, p] = lm.tokenizer.mask_token_id
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(input_ids=masked).logits[0].double(), dim=-1)
        out.append(-float(logp[p, ids[0, p]]))
    return float(np.mean(out))


@pytest.mark.parametrize("family", ["Bert", "Roberta", "DebertaV2", "Electra", "ModernBert"])
def test_masked_families_equal_a_per_token_loop(family):
    tokenizer = tiny_bert_tokenizer()
    lm = MaskedLM(_masked(family, tokenizer), tokenizer)
    res = compute_signals(lm, TEXTS, SignalConfig(kind="pll"), progress=False)
    np.testing.assert_allclose(res.values, [_brute_pll(lm, t) for t in TEXTS], rtol=2e-5)


@pytest.mark.parametrize("family", ["Bert", "Roberta", "DebertaV2", "Electra", "ModernBert"])
def test_token_classifiers_on_the_same_encoders_give_the_pipelines_confidences(family):
    """The NER audit's entity confidence: softmax of the tag logits at each name's first sub-token."""
    import transformers

    from mlflow_mia.signals.entity_confidence import TokenClassifier

    tokenizer = tiny_bert_tokenizer()
    torch.manual_seed(0)
    base = _masked(family, tokenizer).config
    base.id2label, base.label2id = {0: "O", 1: "B-person", 2: "I-person"}, {"O": 0, "B-person": 1, "I-person": 2}
    model = getattr(transformers, f"{family}ForTokenClassification")(base).eval()
    classifier = TokenClassifier(model, tokenizer)
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
    rows, cols = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 1])
    with torch.no_grad():
        expected = model(**enc).logits[rows, cols]
    torch.testing.assert_close(classifier.logits_at(enc["input_ids"], enc["attention_mask"], rows, cols), expected,
                               rtol=1e-5, atol=1e-5)


def test_an_unknown_architecture_is_refused_with_the_kinds_supported():
    from transformers import T5Config, T5ForConditionalGeneration

    from mlflow_mia.models.resolve import resolve_model

    tokenizer = tiny_bert_tokenizer()
    model = T5ForConditionalGeneration(T5Config(vocab_size=len(tokenizer), d_model=16, d_ff=32, num_layers=1,
                                                num_heads=2, d_kv=8))
    with pytest.raises(ValueError, match="is an encoder-decoder model; the kinds of model an audit supports are: "
                                         "causal LMs .*; masked LMs"):
        resolve_model((model, tokenizer))
