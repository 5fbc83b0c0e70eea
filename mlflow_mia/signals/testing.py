"""Tiny tokenizers and models built locally, for tests, doctests and benchmarks.

Nothing here downloads anything. The BERT-style tokenizer uses [CLS] x [SEP]
and the RoBERTa-style one <s> x </s>, so code that must read special tokens
from the tokenizer is exercised with both conventions.
"""

from __future__ import annotations
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import (PreTrainedTokenizerFast, BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM,
                              GPT2Config, GPT2LMHeadModel)

WORDS = (
    "the a an of to in on at and or but is was are were be been cat dog mat sat ran hat "
    "bank loan rate market profit growth shares firm company said year new old good bad "
    "patient note doctor pain fever drug dose mg day week month record privacy model data "
    "one two three four five six seven eight nine ten big small red blue green . , ! ? ' -"
).split()


def _vocab(specials: list[str]) -> dict[str, int]:
    tokens = specials + list(dict.fromkeys(WORDS)) + ["##s", "##ed", "##ing", "##er"]
    return {t: i for i, t in enumerate(tokens)}


def tiny_bert_tokenizer():
    """A lower-casing WordPiece tokenizer with BERT special tokens ([PAD] = 0)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = _vocab(specials)
    tk = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]", model_max_length=64)


def tiny_roberta_tokenizer():
    """A word-level tokenizer with RoBERTa special tokens (<s> = 0, <pad> = 1)."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = _vocab(specials)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>",
                                   model_max_length=64)


def tiny_bert(tokenizer=None, *, seed: int = 0, hidden: int = 32, layers: int = 2, max_positions: int = 64):
    """A randomly initialised ``BertForMaskedLM`` sized to ``tokenizer``; returns ``(model, tokenizer)``."""
    tokenizer = tokenizer or tiny_bert_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                        pad_token_id=tokenizer.pad_token_id)
    return BertForMaskedLM(config).eval(), tokenizer


def tiny_roberta(tokenizer=None, *, seed: int = 0, hidden: int = 32, layers: int = 2, max_positions: int = 66):
    """A randomly initialised ``RobertaForMaskedLM``; returns ``(model, tokenizer)``."""
    tokenizer = tokenizer or tiny_roberta_tokenizer()
    torch.manual_seed(seed)
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                           pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    return RobertaForMaskedLM(config).eval(), tokenizer


def tiny_gpt2_tokenizer():
    """A word-level tokenizer in GPT-2's manner: no token added around a text, ``<|endoftext|>`` = 0, no pad token."""
    vocab = _vocab(["<|endoftext|>", "<unk>"])
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<unk>", model_max_length=64)


def tiny_gpt2(tokenizer=None, *, seed: int = 0, hidden: int = 32, layers: int = 2, max_positions: int = 64):
    """A randomly initialised ``GPT2LMHeadModel`` sized to ``tokenizer``; returns ``(model, tokenizer)``."""
    tokenizer = tokenizer or tiny_gpt2_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=hidden, n_layer=layers, n_head=2, n_positions=max_positions,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return GPT2LMHeadModel(config).eval(), tokenizer
