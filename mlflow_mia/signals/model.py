"""A masked language model with its tokenizer and a stable identity.

This is the only place (with ``energy.py``) that touches torch models. A model
has a display identity (``model_id``: a registry URI resolved to a version when
the model comes from MLflow, else a content hash of the weights) and a cache
identity (:mod:`mlflow_mia.signals.identity`): ``weights_id`` (the content hash of
the weights), ``config_id`` (the architecture settings of ``config.json`` and the
model class: the same weights with another ``hidden_act`` or ``layer_norm_eps``
compute other values) and ``tokenizer_id``. Every on-disk store keys its rows by all three.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mlflow_mia.signals.identity import ModelIdentity
from mlflow_mia.signals.last_layer import hidden_at, last_layer_of
from mlflow_mia.signals.token_stats import STATS_COLUMNS, blocked_logprob_stats, logprob_stats_of_logits
from mlflow_mia.signals.placement import is_dispatched

__all__ = ["MaskedLM"]

log = logging.getLogger(__name__)

# Attribute names under which Hugging Face *ForMaskedLM classes keep their head
# (BERT/DeBERTa: cls, RoBERTa/XLM-R/CamemBERT: lm_head, ALBERT: predictions).
_HEAD_ATTRIBUTES = ("cls", "lm_head", "predictions")
# Checkpoint key prefixes of MLM heads (also ELECTRA's generator_lm_head, DistilBERT's vocab_*).
_HEAD_PREFIXES = tuple(f"{a}." for a in _HEAD_ATTRIBUTES) + ("generator_lm_head.", "vocab_")


def as_masked_lm(obj, *, role: str = "model") -> "MaskedLM":
    """A :class:`MaskedLM` from a MaskedLM, a ``(model, tokenizer)`` pair or a local folder.

    Raises
    ------
    ValueError
        Not a masked LM (see :class:`MaskedLM` and :meth:`MaskedLM.from_pretrained`).
    TypeError
        ``obj`` is of another type.
    """
    return as_wrapped(obj, role, MaskedLM, lambda model: MaskedLM, lambda folder: MaskedLM, "a MaskedLM")


def as_wrapped(obj, role: str, accepted, pair_wrapper, folder_wrapper, names: str):
    """``obj`` if an instance of ``accepted``, else a pair or folder wrapped in the class the callables pick.

    ``pair_wrapper(model)`` and ``folder_wrapper(path)`` return the wrapper class for a
    ``(model, tokenizer)`` pair and a folder; ``names`` lists the accepted wrappers in the error.

    Raises
    ------
    TypeError
        ``obj`` is of another type.
    """
    if isinstance(obj, accepted):
        return obj
    if isinstance(obj, tuple) and len(obj) == 2:
        return pair_wrapper(obj[0])(obj[0], obj[1], name=role)
    if isinstance(obj, (str, os.PathLike)):
        return folder_wrapper(obj).from_pretrained(obj, name=role)
    raise TypeError(f"the {role} must be {names}, a (model, tokenizer) pair or a local folder, "
                    f"got {type(obj).__name__}")


@dataclass
class MaskedLM(ModelIdentity):
    """A Hugging Face masked LM, its tokenizer and a cache identity.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model with an MLM head (``AutoModelForMaskedLM``).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer; must define a mask token.
    model_id : str, optional
        Identity shown in reports and run parameters (e.g. ``"models:/bbc-target/3"``);
        by default the sha256 of the weights. The signal cache is keyed by
        :attr:`weights_id`, never by this name.
    name : str, optional
        Human-readable name for logs and reports.

    Raises
    ------
    ValueError
        The model has no MLM head, or the tokenizer has no mask token or pad token.
    """

    kind: ClassVar[str] = "masked"
    auto_model: ClassVar[str] = "AutoModelForMaskedLM"
    head_prefixes: ClassVar[tuple] = _HEAD_PREFIXES
    objective: ClassVar[str] = "with an MLM objective first"

    _projection: object = field(default=None, init=False, repr=False)  # None: undecided, False: none
    _last_layer: object = field(default=None, init=False, repr=False)  # the same, of last_layer_of

    def __post_init__(self):
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if head is None:
            raise ValueError(
                f"{type(self.model).__name__} has no masked-LM head; load the model with "
                "transformers.AutoModelForMaskedLM (e.g. BertForMaskedLM), not AutoModel"
            )
        if getattr(self.tokenizer, "mask_token_id", None) is None:
            raise ValueError(
                f"tokenizer {type(self.tokenizer).__name__} has no mask token; masked energies need one "
                "(use the tokenizer the MLM was trained with)"
            )
        if getattr(self.tokenizer, "pad_token_id", None) is None:
            raise ValueError(f"tokenizer {type(self.tokenizer).__name__} has no pad token; set tokenizer.pad_token")
        self._default_names()

    @property
    def max_length(self) -> int:
        """Model limit in tokens, special tokens included."""
        limits = [getattr(self.tokenizer, "model_max_length", None)]
        config = getattr(self.model, "config", None)
        positions = getattr(config, "max_position_embeddings", None)
        if positions:
            # RoBERTa-style models offset positions by padding_idx + 1.
            offset = (config.pad_token_id + 1) if getattr(config, "model_type", "") in ("roberta", "xlm-roberta",
                                                                                         "camembert") else 0
            limits.append(positions - offset)
        limits = [x for x in limits if isinstance(x, int) and 0 < x < 1_000_000]
        return min(limits) if limits else 512

    def split_head(self):
        """Return ``(encoder, head)`` so the head can run on masked positions only, or None.

        None for a model placed by accelerate (:func:`~mlflow_mia.signals.placement.is_dispatched`): it runs
        whole, its hooks moving each layer's inputs and weights.
        """
        if is_dispatched(self.model):
            return None
        for attr in _HEAD_ATTRIBUTES:
            head = getattr(self.model, attr, None)
            if isinstance(head, torch.nn.Module):
                return self.model.base_model, head
        return None

    def target_logprobs_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                           cols: torch.Tensor, targets: torch.Tensor, *, chunk_rows: int = 512,
                           vocab_block: int = 2048, stats: bool = False) -> torch.Tensor:
        """``log p(targets[i] | input)`` at positions ``(rows[i], cols[i])``, shape (n_positions,), float32.

        With ``stats=True``, shape (n_positions, 4): ``log p(target)``, the mean and
        standard deviation of ``log p`` under the model's own distribution at the
        position (Min-K%++) and whether the target is its argmax (1.0/0.0, EZ-MIA;
        :mod:`mlflow_mia.signals.token_stats`), from the same logits.

        Same numbers as ``log_softmax(logits_at(...))`` at the targets (to float32
        rounding), computed as ``logit[target] - logsumexp(logits)`` without ever
        holding a full row of logits when the head ends in its output embeddings
        (:meth:`features_at` then :meth:`target_logprobs_of_features`). Heads of other
        shapes fall back to full logits, ``chunk_rows`` positions at a time.
        """
        if self.has_projection():
            return self.target_logprobs_of_features(self.features_at(input_ids, attention_mask, rows, cols), targets,
                                                    chunk_rows=chunk_rows, vocab_block=vocab_block, stats=stats)
        return self._target_logprobs_from_logits(self._position_logits(input_ids, attention_mask), rows, cols,
                                                 targets, chunk_rows, stats)

    def has_projection(self) -> bool:
        """True when the MLM head is ``features -> output embeddings`` (BERT, RoBERTa, ALBERT, ...).

        Decided once per model: the head must be separable (:meth:`split_head`), its
        output embeddings an ``nn.Linear`` inside it, and on a few random hidden
        states the projection of the captured features must equal the head's output.
        """
        if self.split_head() is None:
            return False
        if self._projection is None:
            self._projection = self._find_projection() or False
        return self._projection is not False

    def features_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                    cols: torch.Tensor, *, max_per_row: int | None = None) -> torch.Tensor:
        """Inputs of the vocabulary projection at positions ``(rows[i], cols[i])``, shape (n_positions, d).

        The encoder runs on the whole batch but its last layer, which (BERT-like layers,
        :func:`~mlflow_mia.signals.last_layer.last_layer_of`) runs its keys and values
        on the whole batch and the rest only at the selected positions; the head's
        transform (dense, activation, layer norm) runs only there too. Requires
        :meth:`has_projection`.
        Features of several batches can be concatenated for one
        :meth:`target_logprobs_of_features` call. ``max_per_row``: the most positions in
        one row, when known on the host (saves a device-to-host read per batch).
        """
        self._require_projection()
        encoder, head = self.split_head()
        if self._last_layer is None:
            self._last_layer = last_layer_of(encoder) or False
        if self._last_layer is not False:
            return input_of(self._projection, head,
                             hidden_at(encoder, self._last_layer, input_ids, attention_mask, rows, cols,
                                       max_per_row=max_per_row))
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return input_of(self._projection, head, hidden[rows, cols])

    def target_logprobs_of_features(self, features: torch.Tensor, targets: torch.Tensor, *, chunk_rows: int = 512,
                                    vocab_block: int = 2048, stats: bool = False) -> torch.Tensor:
        """``log_softmax(projection(features))[i, targets[i]]``, shape (n,), float32.

        ``stats=True``: shape (n, 4), with Min-K%++'s ``mu`` and ``sigma`` and the ``top1`` flag of each row
        (:func:`~mlflow_mia.signals.token_stats.blocked_logprob_stats`) in the same pass.

        The vocabulary projection runs ``vocab_block`` words at a time for
        ``chunk_rows`` positions, each block's log-sum-exp folded into a running one
        while the block is still in cache; the target logit is one dot product per
        position. On 2 CPU cores this ran the 30k-word projection about a third faster
        than one ``(positions, vocab)`` product followed by passes over it, faster still
        with 512 positions than with 150 (``benchmarks/bench_energy.py``); peak memory
        does not depend on the vocabulary size.
        """
        self._require_projection()
        decoder = self._projection
        kernel = blocked_logprob_stats if stats else blocked_target_logprobs
        out = torch.empty((len(features), len(STATS_COLUMNS)) if stats else len(features), dtype=torch.float32,
                          device=features.device)
        for start in range(0, len(features), chunk_rows):
            stop = start + chunk_rows
            out[start:stop] = kernel(features[start:stop], decoder.weight, decoder.bias, targets[start:stop],
                                     vocab_block)
        return out

    @staticmethod
    def _target_logprobs_from_logits(logits_of, rows, cols, targets, chunk_rows: int,
                                     stats: bool = False) -> torch.Tensor:
        """The fallback of :meth:`target_logprobs_at`: full logits rows, log-sum-exp in place."""
        out = torch.empty((len(rows), len(STATS_COLUMNS)) if stats else len(rows), dtype=torch.float32,
                          device=rows.device)
        for start in range(0, len(rows), chunk_rows):
            stop = start + chunk_rows
            logits = logits_of(rows[start:stop], cols[start:stop]).float()
            if stats:
                out[start:stop] = logprob_stats_of_logits(logits, targets[start:stop])
                continue
            target = logits.gather(1, targets[start:stop, None]).squeeze(1)
            top = logits.amax(dim=-1, keepdim=True)
            # logsumexp in place (the logits are not needed again): two passes fewer than torch.logsumexp
            out[start:stop] = target - top.squeeze(1) - logits.sub_(top).exp_().sum(dim=-1).log()
        return out

    def _require_projection(self) -> None:
        if not self.has_projection():
            raise ValueError(f"{type(self.model).__name__}: the MLM head does not end in its output embeddings "
                             "(see has_projection); use target_logprobs_at")

    def _find_projection(self) -> torch.nn.Linear | None:
        split = self.split_head()
        decoder = self.model.get_output_embeddings()
        hidden_size = getattr(getattr(self.model, "config", None), "hidden_size", None)
        if split is None or not isinstance(decoder, torch.nn.Linear) or not isinstance(hidden_size, int):
            return None
        _, head = split
        if not any(m is decoder for m in head.modules()):
            return None
        generator = torch.Generator().manual_seed(0)
        probe = torch.randn(4, hidden_size, generator=generator).to(decoder.weight.device, decoder.weight.dtype)
        with torch.inference_mode():
            features = input_of(decoder, head, probe)
            if features is None:
                return None
            expected = head(probe).float()
            got = torch.nn.functional.linear(features, decoder.weight, decoder.bias).float()
        scale = max(float(expected.abs().max()), 1.0)
        if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-3, atol=1e-4 * scale):
            log.debug("%s: head is not features -> output embeddings; using full logits", self.name)
            return None
        return decoder

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                  cols: torch.Tensor) -> torch.Tensor:
        """MLM logits of shape (n_positions, vocab) at positions ``(rows[i], cols[i])`` only.

        The encoder runs on the whole batch; the LM head (for a 30k vocabulary most of
        a small model's arithmetic) only at the selected positions. Models whose head
        cannot be separated (see :meth:`split_head`) compute all logits and select.
        """
        return self._position_logits(input_ids, attention_mask)(rows, cols)

    def _position_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """Run the encoder once; return ``logits_of(rows, cols)`` applying the head at those positions."""
        split = self.split_head()
        if split is None:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
            return lambda rows, cols: logits[rows, cols]
        encoder, head = split
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return lambda rows, cols: head(hidden[rows, cols])


class _Captured(Exception):
    """Raised by the hook of :func:`input_of` to stop the head (or model) before its projection."""


def input_of(decoder: torch.nn.Module, head, *args, **kwargs) -> torch.Tensor | None:
    """What ``head(*args, **kwargs)`` feeds into ``decoder`` (the head stops there), or None if it never calls it."""
    captured = []

    def stop(module, inputs):
        captured.append(inputs[0])
        raise _Captured

    handle = decoder.register_forward_pre_hook(stop)
    try:
        head(*args, **kwargs)
    except _Captured:
        pass
    finally:
        handle.remove()
    return captured[0] if captured else None


def blocked_target_logprobs(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                             targets: torch.Tensor, block: int) -> torch.Tensor:
    """``log_softmax(features @ weight.T + bias)[i, targets[i]]`` in float32, shape (n,).

    The vocabulary (rows of ``weight``, shape (vocab, hidden)) is processed ``block``
    words at a time with a running (max, sum of exp) pair, the streaming form of
    log-sum-exp: ``lse = m + log(sum_b exp(m_b - m) * s_b)``.
    """
    top = total = None
    for start in range(0, weight.shape[0], block):
        z = torch.nn.functional.linear(features, weight[start:start + block],
                                       None if bias is None else bias[start:start + block]).float()
        z_max = z.amax(dim=1)
        if top is None:
            top, total = z_max, z.sub_(z_max[:, None]).exp_().sum(dim=1)
        else:
            new = torch.maximum(top, z_max)
            total = total.mul_((top - new).exp_()).add_(z.sub_(new[:, None]).exp_().sum(dim=1))
            top = new
    target = (features.float() * weight[targets].float()).sum(dim=1)
    if bias is not None:
        target += bias[targets].float()
    return target - top - total.log()
