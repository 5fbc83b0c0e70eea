"""Masked-LM training for the demo: a WordPiece tokenizer, a small BERT, a plain torch loop.

The demo needs three to four models trained on a laptop-class CPU in minutes, each
reproducible from a seed, so this module keeps the loop small and explicit:

- :func:`train_tokenizer` learns a lower-cased WordPiece vocabulary with the
  ``tokenizers`` library and wraps it as a ``BertTokenizerFast`` (saved and reloaded by
  ``save_pretrained`` / ``from_pretrained`` like any Hugging Face tokenizer).
- :func:`new_model` builds a ``BertForMaskedLM`` from a :class:`~mlflow_mia.demo.specs.ModelSpec` with a fixed
  seed: the target and reference models share one initialisation, so any difference
  between them comes from their training data (the paper's setting).
- :func:`train_mlm` runs AdamW with linear warm-up and decay over length-bucketed
  batches; masking is ``transformers.DataCollatorForLanguageModeling`` with an explicit
  seed (15% of tokens, 80/10/10 replacement). The LM head runs on the masked positions
  only, which for a small model is most of the arithmetic saved.
Nothing here touches the global random state (``torch.random.fork_rng``; a seeded numpy generator for batches).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Sequence

import numpy as np
import torch

from mlflow_mia.progress import bar as progress_bar, log_epoch
# The specs (demo/specs.py, shared with the causal demo): used here, and importable from here as before
from mlflow_mia.demo.specs import ModelSpec, TrainConfig, TrainResult

__all__ = ["ModelSpec", "TrainConfig", "train_tokenizer", "new_model", "train_mlm", "heldout_loss"]

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_tokenizer(texts: Sequence[str], *, vocab_size: int, min_frequency: int = 2,
                    model_max_length: int = 128):
    """Learn a lower-cased BERT WordPiece tokenizer from ``texts``.

    Parameters
    ----------
    texts : sequence of str
        Training text (the demo uses text of no target-pool or population article).
    vocab_size : int
        Vocabulary size including the special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
    min_frequency : int
        Merges need at least this many occurrences.
    model_max_length : int
        Written to the tokenizer config (the model's position limit).

    Returns
    -------
    transformers.BertTokenizerFast
        Same texts and settings -> same vocabulary (the trainer is deterministic).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=True, unk_token="[UNK]", sep_token="[SEP]",
                             pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                             model_max_length=model_max_length)


def new_model(tokenizer, spec: ModelSpec, *, seed: int = 0):
    """A freshly initialised ``BertForMaskedLM`` sized for ``tokenizer``.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        Its ``len()`` (not ``vocab_size``: added tokens count) sets the vocabulary.
    spec : ModelSpec
    seed : int
        Same seed, spec and tokenizer -> identical weights.
    """
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads, intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings, hidden_dropout_prob=spec.dropout,
        attention_probs_dropout_prob=spec.dropout, pad_token_id=tokenizer.pad_token_id,
    )
    return seeded_model(BertForMaskedLM, config, seed=seed)


def seeded_model(model_class, config, *, seed: int):
    """``model_class(config)``, its weights drawn under ``torch.manual_seed(seed)`` in a forked random state.

    The initialisation of :func:`new_model` and :func:`~mlflow_mia.demo.causal_train.new_causal_model`:
    same class, config and seed -> identical weights; torch's global random state is left as it was.

    Parameters
    ----------
    model_class : type
        A transformers model class (``BertForMaskedLM``, ``GPT2LMHeadModel``).
    config : transformers.PretrainedConfig
    seed : int

    Returns
    -------
    transformers.PreTrainedModel
        Freshly initialised, in training mode (as the class builds it).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_class(config)


def _batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of index batches: shuffled, then sorted by length inside windows of 50 batches.

    Sentences of similar length share a batch (little padding), while the window keeps
    the order random.
    """
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start:start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def train_steps(model, lengths: np.ndarray, config: TrainConfig, batch_loss, *, norm_name: str, progress: bool,
                 desc: str, log: logging.Logger) -> TrainResult:
    """The training loop of :func:`train_mlm` and :func:`~mlflow_mia.demo.causal_train.train_causal`.

    AdamW (no weight decay on biases and norm weights), linear warm-up, gradients clipped to norm 1,
    batches of similar length (:func:`_batches`), torch's random state forked and seeded with ``config.seed``.

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place; left in eval mode.
    lengths : ndarray of int, shape (n,)
        Token count of each training example.
    config : TrainConfig
        ``steps`` (or ``epochs``), batch size, learning rate, weight decay, warm-up, seed.
    batch_loss : callable
        ``batch_loss(index) -> (loss, attention_mask)`` for the examples at ``index``: the
        scalar loss to minimise and the (batch, width) mask of the tokens it read.
    norm_name : str
        A parameter whose name contains it is a norm weight (no weight decay).
    progress, desc : bool, str
        As for :func:`train_mlm`.
    log : logging.Logger
        Logger of the summary line. Without a bar, each epoch logs a line (:func:`~mlflow_mia.progress.log_epoch`).

    Returns
    -------
    TrainResult
    """
    from transformers import get_linear_schedule_with_warmup

    rng = np.random.default_rng(config.seed)
    per_epoch = max(1, math.ceil(len(lengths) / config.batch_size))  # _batches makes at least this many
    total_steps = config.steps or max(1, math.ceil(config.epochs * per_epoch))

    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim < 2 or norm_name in name or name.endswith("bias") else decay).append(param)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=config.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total_steps), total_steps)

    model.train()
    step, tokens, epoch_losses = 0, 0, []
    start = time.perf_counter()
    bar = progress_bar(total=total_steps, desc=desc, unit="step", progress=progress, summary=False, leave=False)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            while step < total_steps:
                losses = []
                for index in _batches(lengths, config.batch_size, rng):
                    if step >= total_steps:
                        break
                    loss, attention_mask = batch_loss(index)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    scheduler.step()
                    step += 1
                    tokens += int(attention_mask.sum())
                    losses.append(loss.item())
                    bar.update(1)
                    if step % 20 == 0:
                        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                epoch_losses.append(float(np.mean(losses)) if losses else float("nan"))
                if not progress:  # no bar: one line per epoch (shown unless --quiet)
                    log_epoch(desc, epoch_losses, step, total_steps, per_epoch, time.perf_counter() - start)
    finally:
        bar.close()
        model.eval()
    seconds = time.perf_counter() - start
    result = TrainResult(steps=step, tokens=tokens, seconds=seconds, epoch_losses=tuple(epoch_losses))
    log.info("%s: %d steps, %d tokens in %.1f s (%.0f tokens/s), final epoch loss %.3f", desc, step, tokens,
             seconds, result.tokens_per_second, epoch_losses[-1])
    return result


def _masked_lm_loss(model, input_ids, attention_mask, labels):
    """Cross-entropy over masked positions, running the LM head on those positions only."""
    selected = labels != -100
    head = getattr(model, "cls", None)
    if head is None:  # not a BERT-style model: full logits
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[selected]
    else:
        hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = head(hidden[selected])
    return torch.nn.functional.cross_entropy(logits.float(), labels[selected])


def mlm_examples(tokenizer, texts: Sequence[str], config: TrainConfig, *, caller: str):
    """The masked-LM training examples of ``texts`` and the collator that masks them (:func:`train_mlm`, DP-SGD).

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        Must define a mask token.
    texts : sequence of str
        One example per text, truncated to ``config.max_length`` tokens.
    config : TrainConfig
        ``max_length``, ``mlm_probability`` and ``seed`` (the collator's masks) are read.
    caller : str
        The training function, named in the error.

    Returns
    -------
    (list of dict, transformers.DataCollatorForLanguageModeling)
        ``{"input_ids", "special_tokens_mask"}`` per text, in order; the collator (15% of the tokens by
        default, 80/10/10 replacement, seeded with ``config.seed``).

    Raises
    ------
    ValueError
        No texts, or a tokenizer without a mask token.
    """
    from transformers import DataCollatorForLanguageModeling

    texts = list(texts)
    if not texts:
        raise ValueError(f"{caller} needs at least one text")
    if tokenizer.mask_token is None:
        raise ValueError("the tokenizer has no mask token; masked-LM training needs one")
    encoded = tokenizer(texts, truncation=True, max_length=config.max_length, return_special_tokens_mask=True)
    examples = [{"input_ids": ids, "special_tokens_mask": sm}
                for ids, sm in zip(encoded["input_ids"], encoded["special_tokens_mask"])]
    return examples, DataCollatorForLanguageModeling(tokenizer, mlm_probability=config.mlm_probability,
                                                     seed=config.seed)


def train_mlm(model, tokenizer, texts: Sequence[str], config: TrainConfig, *, progress: bool = True,
              desc: str = "train") -> TrainResult:
    """Train ``model`` in place with the masked-LM objective on ``texts``.

    Parameters
    ----------
    model : transformers.BertForMaskedLM
    tokenizer : transformers.PreTrainedTokenizerBase
        Must define a mask token.
    texts : sequence of str
        One training example per text (a sentence), truncated to ``config.max_length``.
    config : TrainConfig
    progress : bool
        Show a tqdm bar over steps with the running loss.
    desc : str
        Label of the progress bar and log lines.

    Returns
    -------
    TrainResult
        Steps, tokens, time and per-epoch losses. The model is left in eval mode.

    Raises
    ------
    ValueError
        No texts, or a tokenizer without a mask token.
    """
    examples, collator = mlm_examples(tokenizer, texts, config, caller="train_mlm")
    lengths = np.array([len(e["input_ids"]) for e in examples])

    device = next(model.parameters()).device  # batches follow the model (CPU or GPU)

    def batch_loss(index):
        batch = collator([examples[i] for i in index])
        input_ids = batch["input_ids"].to(device)
        attention_mask = (input_ids != tokenizer.pad_token_id).long()
        return _masked_lm_loss(model, input_ids, attention_mask, batch["labels"].to(device)), attention_mask

    return train_steps(model, lengths, config, batch_loss, norm_name="LayerNorm", progress=progress, desc=desc,
                        log=logger)


@torch.no_grad()
def heldout_loss(model, tokenizer, texts: Sequence[str], *, max_length: int = 64, mask_rate: float = 0.15,
                 seed: int = 0, batch_size: int = 64) -> tuple[float, int]:
    """Masked-LM loss on held-out text: nats per masked token, with masks that every model shares.

    Each text's maskable tokens (special tokens excluded, read from the tokenizer) get
    ``ceil(mask_rate * T)`` positions replaced by the mask token, drawn from
    ``numpy.random.default_rng([seed, i])`` for the ``i``-th text: the same positions for
    every model with this tokenizer, so two models' losses differ only by the models.

    Parameters
    ----------
    model : transformers masked LM
        Left in eval mode.
    tokenizer : transformers.PreTrainedTokenizerBase
        Must define a mask token.
    texts : sequence of str
        Held-out text (no training set of the compared models holds it), truncated to ``max_length``.
    max_length, mask_rate, seed, batch_size
        Truncation in tokens, share of masked tokens (0, 1), mask seed, texts per forward pass.

    Returns
    -------
    (float, int)
        Mean cross-entropy over all masked tokens of all texts (nats), and their number.

    Raises
    ------
    ValueError
        No texts, no mask token, or ``mask_rate`` outside (0, 1).
    """
    if not texts:
        raise ValueError("heldout_loss needs at least one text")
    if tokenizer.mask_token is None:
        raise ValueError("the tokenizer has no mask token; a masked-LM loss needs one")
    if not 0.0 < mask_rate < 1.0:
        raise ValueError(f"mask_rate must be in (0, 1), got {mask_rate!r}")
    model.eval()
    device = next(model.parameters()).device
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length, return_special_tokens_mask=True)
    total, count = 0.0, 0
    for start in range(0, len(texts), batch_size):
        ids = encoded["input_ids"][start:start + batch_size]
        special = encoded["special_tokens_mask"][start:start + batch_size]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(ids), width), -100, dtype=torch.long)
        for row, (x, sm) in enumerate(zip(ids, special)):
            input_ids[row, :len(x)] = torch.tensor(x)
            maskable = np.flatnonzero(np.asarray(sm) == 0)
            if maskable.size == 0:
                continue
            k = math.ceil(mask_rate * maskable.size)
            chosen = np.random.default_rng([seed, start + row]).choice(maskable, size=k, replace=False)
            labels[row, chosen] = input_ids[row, chosen]
            input_ids[row, chosen] = tokenizer.mask_token_id
        attention = (torch.arange(width)[None, :] < torch.tensor([len(x) for x in ids])[:, None]).long()
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits.cpu()
        nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100,
                                                reduction="sum")
        total += float(nll)
        count += int((labels != -100).sum())
    return (total / count if count else float("nan")), count
