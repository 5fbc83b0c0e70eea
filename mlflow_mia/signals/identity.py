"""What identifies a model's signals: digests of its weights, architecture settings and tokenizer.

Every on-disk store keys its rows by :attr:`ModelIdentity.weights_id`,
:attr:`~ModelIdentity.config_id` and :attr:`~ModelIdentity.tokenizer_id`, never by
a model's name: two tracking servers can each hold a different ``models:/tgt/2``, and
a folder can claim any name. :func:`refuse_remote_code` stops a folder whose classes
are not part of transformers before any of its code is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mlflow_mia.signals.placement import load_kwargs, state_items

__all__ = ["refuse_missing_weights", "weights_digest", "tokenizer_difference", "refuse_remote_code"]


def refuse_remote_code(folder: str | os.PathLike, *, source: str | None = None) -> None:
    """Raise when a Hugging Face folder maps auto classes to Python code shipped in it.

    Reads ``config.json`` and ``tokenizer_config.json`` (``auto_map``): transformers
    imports the mapped files when ``trust_remote_code`` is on, so the model's authors
    would run code on the auditor's machine.

    Raises
    ------
    ValueError
        An ``auto_map`` entry exists; the message names the fix (``--trust-remote-code``).
    """
    for name in ("config.json", "tokenizer_config.json"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as fh:
            auto_map = json.load(fh).get("auto_map")
        if auto_map:
            raise ValueError(
                f"{source or os.fspath(folder)}: {name} maps {sorted(auto_map)} to Python code shipped with the "
                "model, and mlflow-mia never runs it by default. If you trust the people who wrote this model, "
                "pass --trust-remote-code (evaluator key trust_remote_code=True)")


def weights_digest(model: torch.nn.Module) -> str:
    """Hex sha256 over parameter and buffer names, dtypes, shapes and bytes (sorted by name)."""
    h = hashlib.sha256()
    for name, tensor in state_items(model):  # offloaded weights (device_map) are read one module at a time
        t = tensor.contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# config.json fields that never change a forward pass's values: where the config was read from, the
# transformers version that wrote it, the class names it suggests (the class actually used is hashed instead),
# the dtype it was saved in (the weights digest covers the dtypes), the attention kernel (same values up to float
# rounding) and switches of what a forward pass returns besides the logits.
CONFIG_FIELDS_IGNORED = frozenset({
    "_name_or_path", "_commit_hash", "transformers_version", "architectures", "dtype", "torch_dtype",
    "_attn_implementation", "_attn_implementation_autoset", "_attn_implementation_internal",
    "output_attentions", "output_hidden_states", "return_dict", "use_cache"})


def _config_fields(value):
    """``value`` without the ignored fields, at any depth (composite configs nest sub-configs)."""
    if isinstance(value, dict):
        return {str(k): _config_fields(v) for k, v in value.items() if k not in CONFIG_FIELDS_IGNORED}
    if isinstance(value, (list, tuple)):
        return [_config_fields(v) for v in value]
    return value


def config_digest(model: torch.nn.Module) -> str:
    """Hex sha256 of what besides the weights decides a forward pass: the class and ``config.json``.

    Hashes the model's class (module and qualified name: a subclass with the same
    weights may compute differently) and ``model.config.to_dict()`` without the
    fields of :data:`CONFIG_FIELDS_IGNORED`, as sorted JSON. Everything else counts,
    including settings that are inert in evaluation mode (dropout rates, label
    names): a spurious cache miss costs time, a shared row a wrong result.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model (with ``config``); a module without one is hashed by its
        class alone.

    Returns
    -------
    str
        64 hex digits. A model built in memory and the same model saved and loaded
        again have the same digest.

    Notes
    -----
    Closes the "config twin" gap (issue 21, High 4): a folder with the weights of a
    cached model and another ``hidden_act`` or ``layer_norm_eps`` in its
    ``config.json`` shared the cached rows of the original.
    """
    cls = type(model)
    config = getattr(model, "config", None)
    fields = _config_fields(config.to_dict()) if hasattr(config, "to_dict") else None
    payload = {"class": f"{cls.__module__}.{cls.__qualname__}", "config": fields}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=repr).encode()).hexdigest()


def tokenizer_digest(tokenizer) -> str:
    """Hex sha256 of what decides token ids: the vocabulary, rules and special tokens."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    h.update(json.dumps(tokenizer.all_special_tokens).encode())
    return h.hexdigest()


def tokenizer_difference(a, b) -> str | None:
    """How two tokenizers differ in what decides token ids, or None when they agree.

    Compares the vocabularies (token -> id, added tokens included) and the special
    tokens map (``[MASK]``, ``[CLS]``, ... and their ids). The likelihood ratio
    subtracts the reference's energy from the target's token by token only when
    both tokenise a text alike, i.e. when this returns None.

    Returns
    -------
    str or None
        A short description of the first difference found.
    """
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        moved = sum(1 for t, i in va.items() if vb.get(t) != i)
        return (f"vocabulary of {len(va)} vs {len(vb)} tokens, {moved} of the first tokenizer's tokens missing "
                "or at another id")
    sa, sb = _special_tokens(a), _special_tokens(b)
    if sa != sb:
        keys = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
        return f"special tokens differ ({', '.join(keys[:4])})"
    return None


def _special_tokens(tokenizer) -> dict:
    out = {k: str(v) for k, v in tokenizer.special_tokens_map.items()}
    out["ids"] = str(sorted(tokenizer.all_special_ids))
    return out



def refuse_missing_weights(info: dict, source: str, *, head: tuple = (), head_name: str = "head", fix: str = "",
                           ignore=None) -> None:
    """Refuse a load that left weights at random: transformers' ``output_loading_info`` names them.

    Any key in ``missing_keys`` (newly initialised at random) or ``mismatched_keys`` (another
    shape) makes every signal partly noise, however few: a LoRA adapter's base saved with
    PEFT's wrapped names (``c_attn.base_layer.weight``) loses its adapted layers this way.

    Parameters
    ----------
    info : dict
        The loading info of ``from_pretrained(..., output_loading_info=True)``.
    source : str
        The folder or URI, for the message.
    head, head_name, fix : optional
        Key prefixes of the task head, its name (``"masked-LM head"``) and what to do when
        only the head is missing (``"Train it with a masked-LM objective"``).
    ignore : callable, optional
        ``ignore(key) -> bool`` for missing keys that are expected (none by default).

    Raises
    ------
    ValueError
        Naming up to 8 keys of each kind and the fix.
    """
    missing = sorted(k for k in info.get("missing_keys", ()) if not (ignore and ignore(k)))
    mismatched = sorted(str(k[0] if isinstance(k, (tuple, list)) else k) for k in info.get("mismatched_keys", ()))
    if not missing and not mismatched:
        return
    if missing and head and all(k.startswith(head) for k in missing) and not mismatched:
        raise ValueError(f"{source!r} has no trained {head_name} (missing weights: {missing[:4]}); its predictions "
                         f"would be random. {fix}")
    parts = [f"{len(missing)} weight(s) missing from the checkpoint, which transformers would initialise at random "
             f"({', '.join(missing[:8])}{', ...' if len(missing) > 8 else ''})"] if missing else []
    if mismatched:
        parts.append(f"{len(mismatched)} weight(s) of another shape ({', '.join(mismatched[:8])})")
    raise ValueError(f"{source!r} does not load as saved: {'; '.join(parts)}. An audit of such a model measures "
                     "random weights. Save the model with save_pretrained (for a PEFT adapter, log the PeftModel "
                     "itself or pass its folder with --base-model), or load it with the class it was trained as")

@dataclass
class ModelIdentity:
    """A ``(model, tokenizer)`` pair, its names, and the digests that identify its signals (each computed once).

    The caches are keyed by :attr:`weights_id`, :attr:`config_id` and
    :attr:`tokenizer_id`, never by a model's name: two tracking servers can each hold a different ``models:/tgt/2``,
    and a folder can claim any name. The base of :class:`MaskedLM` and of
    :class:`~mlflow_mia.signals.entity_confidence.TokenClassifier`.
    """

    model: torch.nn.Module
    tokenizer: object
    model_id: str | None = None
    name: str | None = None
    _tokenizer_id: str | None = field(default=None, init=False, repr=False)
    _weights_id: str | None = field(default=None, init=False, repr=False)

    @property
    def weights_id(self) -> str:
        """``"sha256:<hex>"`` of the weights (:func:`weights_digest`)."""
        if self._weights_id is None:
            self._weights_id = "sha256:" + weights_digest(self.model)
        return self._weights_id

    @property
    def config_id(self) -> str:
        """Hex digest of the model class and its architecture settings (:func:`config_digest`).

        Computed on each access (cheap): a config changed after loading counts.
        """
        return config_digest(self.model)

    @property
    def tokenizer_id(self) -> str:
        """Hex digest of the tokenizer (:func:`tokenizer_digest`)."""
        if self._tokenizer_id is None:
            self._tokenizer_id = tokenizer_digest(self.tokenizer)
        return self._tokenizer_id

    def _default_names(self) -> None:
        """Default ``model_id`` to :attr:`weights_id` and ``name`` to ``model_id``; put the model in eval mode."""
        if self.model_id is None:
            self.model_id = self.weights_id
        if self.name is None:
            self.name = self.model_id
        self.model.eval()

    #: What :meth:`from_pretrained` loads (set by each language-model class): its kind (named in errors), the
    #: transformers auto class, the LM head's weight-name prefixes, and the training fix the missing-head error names.
    kind: ClassVar[str] = ""
    auto_model: ClassVar[str] = ""
    head_prefixes: ClassVar[str | tuple] = ()
    objective: ClassVar[str] = ""

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, model_id: str | None = None, name: str | None = None,
                        **kwargs):
        """Load the class's model (:attr:`auto_model`: ``AutoModelForMaskedLM`` for
        :class:`~mlflow_mia.signals.model.MaskedLM`, ``AutoModelForCausalLM`` for
        :class:`~mlflow_mia.signals.causal_model.CausalLM`) and ``AutoTokenizer`` from a local folder or hub id.

        No code shipped with the model runs unless ``trust_remote_code=True`` is passed.

        Raises
        ------
        ValueError
            The architecture has no class of this kind, the folder maps classes to shipped code (without
            ``trust_remote_code=True``), or the checkpoint lacks the LM head's weights (e.g. a sentence
            encoder saved without its MLM head, an untied ``lm_head``): transformers would initialise
            them at random, and every signal would be noise.
        """
        import transformers

        return cls._load_pretrained(getattr(transformers, cls.auto_model), transformers.AutoTokenizer, path,
                                    kind=cls.kind, head_prefixes=cls.head_prefixes, objective=cls.objective,
                                    model_id=model_id, name=name, kwargs=kwargs)

    @classmethod
    def _load_pretrained(cls, auto_model, auto_tokenizer, path: str | os.PathLike, *, kind: str,
                         head_prefixes: str | tuple[str, ...], objective: str, model_id: str | None,
                         name: str | None, kwargs: dict):
        """Load ``auto_model`` and ``auto_tokenizer`` from ``path`` and wrap them in ``cls``.

        Shared by :meth:`MaskedLM.from_pretrained` and
        :meth:`~mlflow_mia.signals.causal_model.CausalLM.from_pretrained`: no shipped code
        unless ``kwargs`` holds ``trust_remote_code=True`` (:func:`refuse_remote_code`).

        Parameters
        ----------
        auto_model, auto_tokenizer : type
            transformers auto classes (e.g. ``AutoModelForMaskedLM``, ``AutoTokenizer``).
        path : str or path-like
            A local folder or hub id.
        kind : str
            ``"masked"`` or ``"causal"``, named in the errors.
        head_prefixes : str or tuple of str
            Weight-name prefixes of the LM head; a missing one is an error.
        objective : str
            The training fix the missing-head error names.
        model_id, name : str, optional
            Passed to ``cls`` (``name`` defaults to ``path``).
        kwargs : dict
            Further ``from_pretrained`` arguments of the model (``trust_remote_code`` is popped).

        Raises
        ------
        ValueError
            The model class cannot load the folder, the folder ships code (without
            ``trust_remote_code=True``), or the checkpoint lacks the head's weights.
        """
        path = os.fspath(path)
        trust = bool(kwargs.pop("trust_remote_code", False))
        if not trust and os.path.isdir(path):
            refuse_remote_code(path)
        try:
            model, info = auto_model.from_pretrained(path, output_loading_info=True, trust_remote_code=trust,
                                                     **{**load_kwargs(), **kwargs})
        except ValueError as exc:
            raise ValueError(f"{path!r} cannot be loaded as a {kind} LM: {exc}") from None
        head = (head_prefixes,) if isinstance(head_prefixes, str) else tuple(head_prefixes)
        refuse_missing_weights(info, path, head=head, head_name=f"{kind}-LM head",
                               fix=f"Train or fine-tune it {objective}")
        return cls(model, auto_tokenizer.from_pretrained(path, trust_remote_code=trust), model_id=model_id,
                   name=name or path)
