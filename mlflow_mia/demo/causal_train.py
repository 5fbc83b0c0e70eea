"""Causal-LM training for the causal demo: a byte-level BPE tokenizer, a small GPT-2, a plain torch loop.

The causal counterpart of :mod:`mlflow_mia.demo.train` (same batching, same
seeding rules, nothing touches the global random state):

- :func:`train_bpe_tokenizer` learns a GPT-2-style byte-level BPE vocabulary with the
  ``tokenizers`` library (case kept, no lower-casing) and wraps it as a
  ``GPT2TokenizerFast`` whose only special token is ``<|endoftext|>`` (beginning, end,
  padding and unknown, as GPT-2's). Like GPT-2's, it adds no token to a text, so the
  causal signal scores tokens 2..n of each sentence.
- :func:`new_causal_model` builds a ``GPT2LMHeadModel`` from a :class:`CausalSpec` with a
  fixed seed: target and reference share one initialisation.
- :func:`train_causal` runs AdamW with linear warm-up and decay, next-token cross-entropy
  over every non-padding position (Radford et al. 2019's objective).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

from mlflow_mia.demo.specs import TrainConfig, TrainResult, check_sizes
from mlflow_mia.demo.train import train_steps, seeded_model

__all__: list[str] = []

logger = logging.getLogger(__name__)

END_OF_TEXT = "<|endoftext|>"


@dataclass(frozen=True)
class CausalSpec:
    """Architecture of a GPT-2-shaped causal LM trained from scratch.

    Attributes
    ----------
    hidden_size, num_layers, num_heads, intermediate_size : int
        ``n_embd``, ``n_layer``, ``n_head``, ``n_inner`` of ``GPT2Config``
        (``hidden_size`` divisible by ``num_heads``).
    vocab_size : int
        Target byte-level BPE vocabulary size of :func:`train_bpe_tokenizer` (at least
        257: the 256 bytes and ``<|endoftext|>``).
    max_position_embeddings : int
        ``n_positions``: longest input in tokens.
    dropout : float
        Residual, embedding and attention dropout during training.
    """

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 256
    vocab_size: int = 2000
    max_position_embeddings: int = 128
    dropout: float = 0.1

    def __post_init__(self):
        check_sizes(self, min_vocab_size=257, vocab_note=f" (256 bytes and {END_OF_TEXT})")


def train_bpe_tokenizer(texts: Sequence[str], *, vocab_size: int, min_frequency: int = 2,
                        model_max_length: int = 128):
    """Learn a GPT-2-style byte-level BPE tokenizer from ``texts``.

    Parameters
    ----------
    texts, min_frequency, model_max_length
        As for :func:`~mlflow_mia.demo.train.train_tokenizer`.
    vocab_size : int
        Vocabulary size including the 256 byte tokens and ``<|endoftext|>``.

    Returns
    -------
    transformers.GPT2TokenizerFast
        Same texts and settings -> same vocabulary. Adds no special token to a text;
        ``<|endoftext|>`` is its BOS, EOS, pad and unknown token.
    """

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return GPT2TokenizerFast(tokenizer_object=tok, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT,
                             unk_token=END_OF_TEXT, pad_token=END_OF_TEXT, model_max_length=model_max_length)


def new_causal_model(tokenizer, spec: CausalSpec, *, seed: int = 0):
    """A freshly initialised ``GPT2LMHeadModel`` (tied input and output embeddings) sized for ``tokenizer``.

    Same seed, spec and tokenizer -> identical weights.
    """
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=spec.max_position_embeddings, n_embd=spec.hidden_size,
                        n_layer=spec.num_layers, n_head=spec.num_heads, n_inner=spec.intermediate_size,
                        resid_pdrop=spec.dropout, embd_pdrop=spec.dropout, attn_pdrop=spec.dropout,
                        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot)
    return seeded_model(GPT2LMHeadModel, config, seed=seed)


def train_causal(model, tokenizer, texts: Sequence[str], config: TrainConfig, *, progress: bool = True,
                 desc: str = "train") -> TrainResult:
    """Train ``model`` in place with the next-token objective on ``texts``.

    The loss of a batch is the mean cross-entropy of ``x_t`` given ``x_<t`` over every
    predicted position ``t = 2..n`` of every text (padding excluded): the positions the
    causal signal scores. ``config.mlm_probability`` is not used.

    Parameters
    ----------
    model : transformers.GPT2LMHeadModel
    tokenizer : transformers.PreTrainedTokenizerBase
    texts : sequence of str
        One training example per text (a sentence), truncated to ``config.max_length`` tokens.
    config : TrainConfig
        ``steps`` (or ``epochs``), batch size, learning rate, weight decay, warm-up, seed.
    progress, desc : bool, str
        As for :func:`~mlflow_mia.demo.train.train_mlm`.

    Returns
    -------
    TrainResult
        Steps, tokens, time and per-epoch losses (nats per predicted token). The model is
        left in eval mode.

    Raises
    ------
    ValueError
        No texts, or no text of at least two tokens (nothing to predict).
    """

    texts = list(texts)
    if not texts:
        raise ValueError("train_causal needs at least one text")
    ids = [x for x in tokenizer(texts, truncation=True, max_length=config.max_length)["input_ids"] if len(x) >= 2]
    if not ids:
        raise ValueError("train_causal needs a text of at least two tokens")
    lengths = np.array([len(x) for x in ids])
    pad = tokenizer.pad_token_id

    def batch_loss(index):
        width = int(lengths[index].max())
        input_ids = torch.full((len(index), width), pad, dtype=torch.long)
        for row, i in enumerate(index):
            input_ids[row, :lengths[i]] = torch.tensor(ids[i])
        attention_mask = (torch.arange(width)[None, :] < torch.as_tensor(lengths[index])[:, None]).long()
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        labels = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
        loss = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100)
        return loss, attention_mask

    return train_steps(model, lengths, config, batch_loss, norm_name=".ln_", progress=progress, desc=desc, log=logger)
