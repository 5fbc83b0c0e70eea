"""The norm of a text's loss gradient with respect to the model's parameters: one backward pass per text.

As MIMIR's ``GradNormAttack`` (``mimir/attacks/gradnorm.py``) computes it: the loss
of one text, its gradient with respect to every parameter tensor, each tensor's
``p``-norm, and the mean of those norms over the tensors:

    g(x) = (1/|Theta|) sum_{W in Theta} || d loss(x) / dW ||_p,   p in {1, 2, inf} (MIMIR's default inf).

``Theta`` is every parameter of the model (``model.parameters()``: a tied input and
output embedding counts once), whether or not it is trainable: frozen parameters
(a PEFT adapter's base) are switched to ``requires_grad`` for the pass and back after.
MIMIR takes the parameters whose gradient exists, which for a frozen base is the
adapter's alone. The model runs in eval mode (no dropout) in its own dtype.

The loss, by model kind:

* causal LM: the mean NLL of tokens 2..n (the ``causal`` signal's value, MIMIR's loss);
* masked LM: the text's signal value, the masked energy ``E(s)`` (Mireshghallah et al.
  2022, Eq. 2, the same K seeded masks and reduction as the signal) or the PLL's mean
  NLL per token, its masked copies in one forward pass.

A backward pass holds the gradients (one value per parameter) and the activations;
:func:`check_backward_fits` estimates both from the parameter count and the model's
shape and refuses, with the figures, a model too large for the device's free memory.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.energy import tokenize, value_settings
from mlflow_mia.signals.masking import pll_masks, sample_masks
from mlflow_mia.signals.runtime import resolve_device

__all__ = ["NORMS", "gradient_norms"]

#: The ``p`` of each norm's name.
NORMS = {"1": 1.0, "2": 2.0, "inf": math.inf}
#: Headroom over the estimate (allocator fragmentation, the optimiser-free backward's temporaries).
SAFETY = 1.25


def aggregate_norm(grads: Sequence[torch.Tensor], p: float) -> float:
    """The mean over tensors of each tensor's ``p``-norm (float64).

    >>> aggregate_norm([torch.tensor([3.0, -4.0]), torch.tensor([1.0])], 2.0)
    3.0
    """
    return float(np.mean([float(torch.linalg.vector_norm(g.double(), ord=p)) for g in grads]))


def _shape(model) -> tuple[int, int, int, int]:
    """(hidden size, layers, attention heads, vocabulary rows) from the model's config (0 where it does not say)."""
    cfg = getattr(model, "config", None)

    def read(*names):
        return int(next((getattr(cfg, a) for a in names if getattr(cfg, a, None)), 0))

    return (read("hidden_size", "n_embd", "d_model"), read("num_hidden_layers", "n_layer", "num_layers"),
            read("num_attention_heads", "n_head"), read("vocab_size"))


def backward_bytes(model, length: int, copies: int = 1) -> int:
    """Estimated bytes a backward pass adds over the loaded weights: gradients plus activations.

    Gradients: twice one value per parameter, in the parameters' dtype (the gradients and
    the temporaries of their accumulation: a tied embedding's two uses each give a full
    gradient before they are summed; GPT-2 small's shape, 124M parameters, peaked at
    1041 MiB over its loaded weights for one 120-token text on CPU, where its gradients
    alone are 475 MiB). Activations of a
    transformer layer for ``s`` tokens: ``s h (34 + 5 a s / h)`` bytes at 2 bytes per
    value (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    Transformer Models", Sec. 4.1; ``h`` hidden size, ``a`` heads), scaled to the
    parameters' dtype, per layer and per copy, plus the float32 logits and their
    log-softmax (2 x vocabulary values per token).

    Parameters
    ----------
    model : torch.nn.Module
    length : int
        Tokens of one sequence.
    copies : int
        Sequences in the pass (a masked LM's masked copies of a text).

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_gpt2
    >>> backward_bytes(tiny_gpt2()[0], 10) > 4 * sum(p.numel() for p in tiny_gpt2()[0].parameters())
    True
    """
    params = list(model.parameters())
    size = params[0].element_size() if params else 4
    hidden, layers, heads, vocab = _shape(model)
    grads = 2 * sum(p.numel() for p in params) * size
    per_layer = length * hidden * 34 + 5 * heads * length ** 2
    return int(grads + copies * (layers * per_layer * size / 2 + length * 2 * vocab * 4))


def free_bytes(device: torch.device) -> int:
    """Free memory on ``device``: CUDA's free bytes, else the host's available physical memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no estimate, no refusal
        return 1 << 62


def check_backward_fits(model, length: int, device: torch.device, *, copies: int = 1,
                        free: int | None = None) -> int:
    """Refuse a backward pass the device cannot hold; return the estimate (bytes) when it fits.

    Raises
    ------
    ValueError
        ``SAFETY`` x :func:`backward_bytes` exceeds the free memory (``free``, default
        :func:`free_bytes`): the message gives the parameter count, the estimate and the
        free memory, and what to do.
    """
    need = backward_bytes(model, length, copies)
    free = free_bytes(device) if free is None else free
    if SAFETY * need > free:
        n = sum(p.numel() for p in model.parameters())
        raise ValueError(f"attack 'grad_norm' needs a backward pass through the target: its {n / 1e6:,.1f}M "
                         f"parameters and a pass of {copies} x {length} tokens need about {SAFETY * need / 2**30:.2f} GiB beside the "
                         f"weights, and {device} has {free / 2**30:.2f} GiB free. Run it on a device with more "
                         "memory, lower max_length, or leave grad_norm out of the attacks")
    return need


def _masked_loss(lm, ids: np.ndarray, maskable: np.ndarray, config: SignalConfig, key: str) -> torch.Tensor:
    """The masked energy or PLL of one text (the signal's value) as a differentiable scalar."""
    t = len(maskable)
    masks = pll_masks(t) if config.kind == "pll" else sample_masks(
        t, rate=config.mask_rate, num_masks=config.num_masks, seed=config.seed, key=key)
    device = next(lm.model.parameters()).device
    copies = np.repeat(ids[None, :], len(masks), axis=0)
    positions = maskable[masks]  # (k, l) positions in ids
    rows = np.repeat(np.arange(len(masks)), masks.shape[1])
    copies[rows, positions.ravel()] = lm.tokenizer.mask_token_id
    logits = lm.model(input_ids=torch.from_numpy(copies).to(device)).logits
    r, c = torch.from_numpy(rows).to(device), torch.from_numpy(positions.ravel()).to(device)
    targets = torch.from_numpy(ids[positions.ravel()]).to(device)
    logp = logits[r, c].float().log_softmax(-1).gather(1, targets[:, None])[:, 0].reshape(masks.shape)
    if config.kind == "energy" and config.energy_reduction == "mean":
        return -(logp.sum(1) / masks.shape[1]).mean()
    return -logp.sum() / len(masks)


def text_loss(lm, ids: np.ndarray, maskable: np.ndarray, config: SignalConfig, key: str) -> torch.Tensor:
    """The loss whose gradient is taken: a causal LM's mean NLL of tokens 2..n, a masked LM's signal value."""
    if not isinstance(lm, CausalLM):
        return _masked_loss(lm, ids, maskable, config, key)
    device = next(lm.model.parameters()).device
    x = torch.from_numpy(ids[None, :]).to(device)
    logp = lm.model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1].float().log_softmax(-1)
    return -logp.gather(1, x[0, 1:, None])[:, 0].mean()


def gradient_norms(lm, texts: Sequence[str], config: SignalConfig | None = None, *, norm: str = "inf",
                   device=None, free: int | None = None) -> np.ndarray:
    """The gradient norm of every text's loss (:func:`text_loss`), one forward and backward pass per text.

    Parameters
    ----------
    lm : CausalLM or MaskedLM
    texts : sequence of str, length n_texts
    config : SignalConfig, optional
        ``max_length`` (truncation as for the signals) and, for a masked LM, ``kind``
        (``energy`` or ``pll``), ``num_masks``, ``mask_rate``, ``seed``, ``energy_reduction``.
    norm : {"1", "2", "inf"}
        ``p`` of each parameter tensor's norm (:data:`NORMS`).
    device : optional
    free : int, optional
        Free bytes to check against (default: measured, :func:`free_bytes`).

    Returns
    -------
    ndarray of shape (n_texts,), float64
        Mean over parameter tensors of ``||d loss / dW||_p`` (nats per unit of parameter, >= 0).

    Raises
    ------
    ValueError
        An unknown ``norm``; a causal text of fewer than 2 tokens; what :func:`check_backward_fits` raises.

    Examples
    --------
    >>> from mlflow_mia.signals.testing import tiny_gpt2
    >>> g = gradient_norms(CausalLM(*tiny_gpt2()), ["the cat sat", "a dog ran ."], norm="2")
    >>> g.shape, bool((g > 0).all())
    ((2,), True)
    """
    if norm not in NORMS:
        raise ValueError(f"gradient norm must be one of {list(NORMS)}, got {norm!r}")
    config = config or SignalConfig(kind="causal" if isinstance(lm, CausalLM) else "energy")
    texts = list(texts)
    ids, maskable, _ = tokenize(lm, texts, max_length=value_settings(lm, config)["max_length"])
    if isinstance(lm, CausalLM) and any(len(x) < 2 for x in ids):
        raise ValueError("a causal LM's loss needs at least 2 tokens per text (tokens 2..n are predicted)")
    dev = resolve_device(device)
    lm.model.to(dev)
    copies = 1 if isinstance(lm, CausalLM) else (max(len(m) for m in maskable) if config.kind == "pll"
                                                 else config.num_masks)
    check_backward_fits(lm.model, max(len(x) for x in ids), dev, copies=copies, free=free)
    params = list(lm.model.parameters())
    flags, training = [p.requires_grad for p in params], lm.model.training
    out = np.empty(len(texts), dtype=np.float64)
    try:
        lm.model.eval()
        for p in params:
            p.requires_grad_(True)
        with torch.enable_grad():
            for i, text in enumerate(texts):
                for p in params:
                    p.grad = None
                text_loss(lm, ids[i], maskable[i], config, text_hash(text)).backward()
                out[i] = aggregate_norm([p.grad for p in params if p.grad is not None], NORMS[norm])
    finally:
        for p, flag in zip(params, flags):
            p.grad = None
            p.requires_grad_(flag)
        lm.model.train(training)
    return out
