"""A tiny token-classification model built locally, for tests, doctests and benchmarks."""

from __future__ import annotations
import torch
from transformers import BertConfig, BertForTokenClassification
from mlflow_mia.signals.testing import tiny_bert_tokenizer

__all__: list[str] = []

TINY_LABELS = ("I-LOC", "O", "B-PER", "B-LOC", "I-PER")  # deliberately not in B/I order


def tiny_token_classifier(labels=TINY_LABELS, *, seed: int = 0, hidden: int = 32, scale: float = 20.0):
    """A randomly initialised ``BertForTokenClassification`` with ``labels`` in this id order.

    Returns ``(model, tokenizer)``; the classifier weights are multiplied by ``scale`` so
    tag probabilities differ clearly between tokens.
    """
    labels = list(labels)
    tokenizer = tiny_bert_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                        num_labels=len(labels), id2label=dict(enumerate(labels)),
                        label2id={t: i for i, t in enumerate(labels)})
    model = BertForTokenClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(scale)
    return model, tokenizer
