"""A causal (left-to-right) language model with its tokenizer and a stable identity, and how a model's kind is read.

A causal LM (``AutoModelForCausalLM``: GPT-2, Pythia, OPT, Llama-style) predicts
each token from the tokens before it; a masked LM (:class:`~mlflow_mia.signals.model.MaskedLM`)
predicts masked tokens from both sides. Which one a model is comes from its config
(:func:`config_kind`: ``architectures``, else ``model_type``) or its class
(:func:`model_kind`): the user names nothing extra. :func:`as_language_model` loads
either kind from a folder, a ``(model, tokenizer)`` pair or a wrapped model.

The identity (weights, config and tokenizer digests), the refusal of shipped code
and the tokenizer checks are those of the masked LMs
(:class:`~mlflow_mia.signals.identity.ModelIdentity`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import ClassVar

import torch

from mlflow_mia.model_kinds import describe_kinds, detect_kind, model_kinds
from mlflow_mia.model_kinds import model_kind as model_kind_entry, register_model_kind
from mlflow_mia.signals.identity import ModelIdentity
from mlflow_mia.signals.model import MaskedLM, as_wrapped, input_of
from mlflow_mia.signals.placement import is_dispatched

__all__ = ["CausalLM", "as_language_model", "language_models", "wrapper_for"]



def _mapping_names(mapping) -> set[str]:
    out = set()
    for value in mapping.values():
        out.update(value if isinstance(value, (tuple, list)) else (value,))
    return out


def _class_names() -> tuple[set[str], set[str], dict, dict]:
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    return (_mapping_names(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), _mapping_names(MODEL_FOR_MASKED_LM_MAPPING_NAMES),
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def config_kind(config) -> str | None:
    """``"causal"``, ``"masked"`` or None (neither) for a transformers config or a ``config.json`` dict.

    The ``architectures`` the model was saved with decide (``GPT2LMHeadModel``:
    causal; ``BertForMaskedLM``: masked; ``BertLMHeadModel``, a BERT trained left to
    right: causal). Without them, ``model_type``: masked when transformers has a
    masked-LM class for it (BERT, RoBERTa), else causal when it has a causal-LM class
    (GPT-2, Llama), else None.

    >>> config_kind({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
    'causal'
    >>> config_kind({"model_type": "bert"}), config_kind({"model_type": "gpt2"}), config_kind({"model_type": "t5"})
    ('masked', 'causal', None)
    """
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    causal, masked, causal_types, masked_types = _class_names()
    for arch in get("architectures") or ():
        if arch in masked:
            return "masked"
        if arch in causal:
            return "causal"
    model_type = get("model_type")
    if model_type in masked_types:
        return "masked"
    if model_type in causal_types:
        return "causal"
    return None


def _builtin_kind(obj) -> str | None:
    """``"causal"``, ``"masked"`` or None for a loaded model (its class, then its config), a config or a dict."""
    if isinstance(obj, dict) or not hasattr(obj, "config"):
        return config_kind(obj or {})
    causal, masked, _, _ = _class_names()
    name = type(obj).__name__
    if name in masked:
        return "masked"
    if name in causal:
        return "causal"
    return config_kind(getattr(obj, "config", None) or {})


def model_kind(model) -> str | None:
    """The registered kind (:mod:`mlflow_mia.model_kinds`) of a loaded model, a config or a ``config.json`` dict."""
    kind = detect_kind(model)
    return kind.name if kind is not None else None


def folder_kind(path: str | os.PathLike) -> str | None:
    """The kind (:func:`model_kind`) of the Hugging Face folder ``path`` from its ``config.json``, or None."""
    config = os.path.join(os.fspath(path), "config.json")
    if not os.path.exists(config):
        return None
    with open(config, encoding="utf-8") as fh:
        return model_kind(json.load(fh))


def language_models() -> tuple:
    """The wrapper classes of every registered model kind: what an audit accepts as target or reference."""
    return tuple(model_kind_entry(name).wrapper for name in model_kinds() if _registered(name))


def _registered(name: str) -> bool:
    try:
        model_kind_entry(name)
    except ValueError:
        return False
    return True


def wrapper_for(wrapper, *, model=None, folder=None):
    """The wrapper of the registered kind the model (or folder) is, when ``wrapper`` is the default :class:`MaskedLM`.

    Any other ``wrapper`` (e.g. the NER audit's token classifier) is returned as given. A model
    no kind recognises falls back to :class:`MaskedLM`, which checks its own head; an
    encoder-decoder model is refused with the kinds that exist.

    Raises
    ------
    ValueError
        An encoder-decoder model (no registered kind takes it), naming the registered kinds.
    """
    if wrapper is not MaskedLM:
        return wrapper
    name = model_kind(model) if model is not None else folder_kind(folder) if folder is not None else None
    if name is not None:
        return model_kind_entry(name).wrapper
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{type(model).__name__} ({getattr(config, 'model_type', '?')}) is an encoder-decoder "
                         f"model; the kinds of model an audit supports are: {describe_kinds()}; and, for the NER "
                         "audit, token classifiers")
    return wrapper


def kind_of(lm) -> str:
    """The kind of a wrapped model (its wrapper's ``kind``; ``"masked"`` for anything else)."""
    return getattr(lm, "kind", None) or "masked"


def as_language_model(obj, *, role: str = "model"):
    """The wrapper of the model's registered kind, from a wrapped model, a pair or a folder.

    Raises
    ------
    ValueError
        The model is of no registered kind, or what the wrapper raises.
    TypeError
        ``obj`` is of another type.
    """
    return as_wrapped(obj, role, language_models(), lambda model: wrapper_for(MaskedLM, model=model),
                       lambda folder: wrapper_for(MaskedLM, folder=folder),
                       "a " + ", a ".join(w.__name__ for w in language_models()))


@dataclass
class CausalLM(ModelIdentity):
    """A Hugging Face causal LM, its tokenizer and a cache identity.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model with a language-modelling head predicting the next token
        (``AutoModelForCausalLM``, e.g. ``GPT2LMHeadModel``).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer. No pad token is needed: padded positions are masked out and
        never scored (:attr:`pad_id` falls back to the end-of-text token, then 0).
    model_id, name : str, optional
        As for :class:`~mlflow_mia.signals.model.MaskedLM`.

    Raises
    ------
    ValueError
        The model has no output embeddings (an ``AutoModel`` without its LM head),
        is an encoder-decoder, or is a masked LM.
    """

    kind: ClassVar[str] = "causal"
    auto_model: ClassVar[str] = "AutoModelForCausalLM"
    head_prefixes: ClassVar[str] = "lm_head."
    objective: ClassVar[str] = "with a language-modelling objective"

    def __post_init__(self):
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if head is None:
            raise ValueError(f"{type(self.model).__name__} has no language-modelling head; load the model with "
                             "transformers.AutoModelForCausalLM (e.g. GPT2LMHeadModel), not AutoModel")
        config = getattr(self.model, "config", None)
        if getattr(config, "is_encoder_decoder", False):
            raise ValueError(f"{type(self.model).__name__} is an encoder-decoder model; causal signals need a "
                             "decoder-only causal LM (AutoModelForCausalLM)")
        if model_kind(self.model) == "masked":
            raise ValueError(f"{type(self.model).__name__} is a masked LM; wrap it in MaskedLM, not CausalLM")
        self._default_names()

    @property
    def max_length(self) -> int:
        """Model limit in tokens (the tokenizer's ``model_max_length`` and the config's positions, the smaller)."""
        config = getattr(self.model, "config", None)
        limits = [getattr(self.tokenizer, "model_max_length", None)]
        for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
            limits.append(getattr(config, attr, None))
        limits = [x for x in limits if isinstance(x, int) and 0 < x < 1_000_000]
        return min(limits) if limits else 1024

    @property
    def pad_id(self) -> int:
        """The id written into padded positions: the pad token, else end of text, else 0 (never scored)."""
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(self.tokenizer, attr, None)
            if isinstance(value, int):
                return value
        return 0

    def projection(self) -> torch.nn.Linear | None:
        """The output embeddings when the logits are exactly ``linear(hidden, W, b)`` of what they receive, else None.

        Decided once per model on a short probe: the input captured at the output
        embeddings, projected, must equal the model's logits (models that scale or
        cap their logits after the projection fail this and get full logits).
        """
        if getattr(self, "_projection", None) is None:
            self._projection = self._find_projection() or False
        return self._projection or None

    def _find_projection(self):
        decoder = self.model.get_output_embeddings()
        if not isinstance(decoder, torch.nn.Linear) or is_dispatched(self.model):
            return None  # a model placed by accelerate may hold its head's weights elsewhere: full logits
        probe = torch.tensor([[self.pad_id] * 2 + list(range(min(6, decoder.out_features)))],
                             device=decoder.weight.device)
        with torch.inference_mode():
            # the mask given: the probe starts with pad ids, which transformers would warn about without one
            logits = self.model(input_ids=probe, attention_mask=torch.ones_like(probe)).logits.float()
            hidden = capture_projection_input(self.model, decoder, probe, torch.ones_like(probe))
            got = torch.nn.functional.linear(hidden, decoder.weight, decoder.bias).float()
        scale = max(float(logits.abs().max()), 1.0)
        if got.shape != logits.shape or not torch.allclose(got, logits, rtol=1e-3, atol=1e-4 * scale):
            return None
        return decoder


def capture_projection_input(model, decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """What ``model`` feeds its output embeddings ``decoder`` (shape (batch, length, hidden)); the projection never runs.

    Raises
    ------
    ValueError
        The model never calls ``decoder``.
    """
    captured = input_of(decoder, model, input_ids=input_ids, attention_mask=attention_mask)
    if captured is None:
        raise ValueError(f"{type(model).__name__} never calls its output embeddings")
    return captured


register_model_kind("causal", CausalLM, lambda obj: _builtin_kind(obj) == "causal", order=10,
                    description="causal LMs (AutoModelForCausalLM: GPT-2, Llama, Mistral, Qwen2, Phi-3, Gemma-2, ...)")
register_model_kind("masked", MaskedLM, lambda obj: _builtin_kind(obj) == "masked", order=20,
                    description="masked LMs (AutoModelForMaskedLM: BERT, RoBERTa, DeBERTa-v2, ELECTRA, ModernBERT, "
                                "...)")
