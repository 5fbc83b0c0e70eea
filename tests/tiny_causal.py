"""Builders the tests of ReCaLL, DC-PDD and the gradient norm share: random sentences and a tiny random Llama."""

from __future__ import annotations

import random

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from mlflow_mia.signals.testing import WORDS

WORDS_ = [w for w in WORDS if w.isalpha()]


def word_texts(n, seed, low=3, high=8):
    """Up to ``n`` distinct sentences of ``low`` to ``high`` random words of the tiny vocabularies."""
    rng = random.Random(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS_) for _ in range(rng.randint(low, high))) for _ in range(n)))


def tiny_llama():
    """A random Llama whose tokenizer adds ``<s>`` in front of every text (no pad token): ``(model, tokenizer)``."""
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *sorted(set(WORDS_))])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  model_max_length=64)
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=2, pad_token_id=None)
    return LlamaForCausalLM(config).eval(), tok
