"""The last encoder layer at the masked positions only: what the masked-LM head reads.

The MLM head reads the last hidden state at the masked positions alone, and in the
last layer only the keys and values of the attention mix positions: the query, the
attention output, the layer norms and the feed-forward block act on each position
by itself. :func:`hidden_at` therefore runs every layer but the last on the whole
batch, then the last layer's keys and values at every position and the rest only
at the selected ones. With one mask per copy (PLL) that skips about 5/6 of the
last layer's products (the feed-forward block is two thirds of a layer).

It applies to encoders whose layers are BERT's (``attention.self.query/key/value``,
``attention.output``, ``intermediate``, ``output``: BERT, RoBERTa, XLM-R, ELECTRA,
CamemBERT, ...), checked once per model by :func:`last_layer_of` on a random
input against the full forward pass; other models keep the full pass.
"""

from __future__ import annotations

import logging

import torch

__all__: list[str] = []

log = logging.getLogger(__name__)

_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output",
          "intermediate", "output")


class _Stopped(Exception):
    """Raised by the pre-hook of :func:`_last_layer_input` once it holds the last layer's input."""


def probe_batch(config, device):
    """A fixed two-row check batch: token ids (2, 7) drawn with seed 0 below ``config.vocab_size``, an
    attention mask with row 1 padded from position 5, and three (row, column) read positions, one of them
    in the padding (its value must not matter). Used to check a partial forward pass against the full one."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, max(int(getattr(config, "vocab_size", 2)), 2), (2, 7), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask, torch.tensor([0, 0, 1], device=device), torch.tensor([1, 6, 2], device=device)


def last_layer_of(encoder: torch.nn.Module, *, tolerance: float = 1e-4) -> torch.nn.Module | None:
    """The encoder's last layer when :func:`hidden_at` reproduces the full forward pass, else None.

    Parameters
    ----------
    encoder : torch.nn.Module
        The base model under the MLM head (``model.base_model``), in eval mode.
    tolerance : float
        Largest absolute difference (in units of the hidden state's largest
        magnitude, at least 1) allowed between :func:`hidden_at` and the full pass on
        a random 2 x 7 input with padding.

    Returns
    -------
    torch.nn.Module or None
        None when the layers are not BERT's (see the module docstring), the layer
        chunks its feed-forward block or is a decoder layer, or the check fails.
    """
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    config = getattr(encoder, "config", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers) or config is None:
        return None
    last = layers[-1]
    try:
        for part in _PARTS:
            last.get_submodule(part)
    except AttributeError:
        return None
    if (getattr(last, "is_decoder", False) or getattr(last, "chunk_size_feed_forward", 0)
            or getattr(config, "position_embedding_type", "absolute") not in ("absolute", None)):
        return None
    ids, mask, rows, cols = probe_batch(config, next(encoder.parameters()).device)
    try:
        with torch.inference_mode():
            expected = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[rows, cols].float()
            got = hidden_at(encoder, last, ids, mask, rows, cols).float()
    except Exception as exc:  # noqa: BLE001 - any mismatch of structure keeps the full pass
        log.debug("last layer at masked positions not applicable (%s: %s); running the full encoder",
                  type(exc).__name__, exc)
        return None
    scale = max(float(expected.abs().max()), 1.0)
    if got.shape != expected.shape or float((got - expected).abs().max()) > tolerance * scale:
        log.debug("last layer at masked positions differs from the full pass; running the full encoder")
        return None
    return last


def _last_layer_input(encoder: torch.nn.Module, last: torch.nn.Module, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor) -> torch.Tensor:
    """The hidden states entering ``last`` (shape (batch, length, d)); the layer itself does not run."""
    captured = []

    def stop(module, args, kwargs):
        captured.append(args[0] if args else kwargs["hidden_states"])
        raise _Stopped

    handle = last.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        encoder(input_ids=input_ids, attention_mask=attention_mask)
    except _Stopped:
        pass
    finally:
        handle.remove()
    if not captured:
        raise RuntimeError("the encoder never called its last layer")
    return captured[0]


def hidden_at(encoder: torch.nn.Module, last: torch.nn.Module, input_ids: torch.Tensor,
              attention_mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, *,
              max_per_row: int | None = None) -> torch.Tensor:
    """``encoder(...).last_hidden_state[rows, cols]``, shape (n_positions, d), with the last layer at those rows only.

    Parameters
    ----------
    encoder, last : torch.nn.Module
        The base model and its last layer (:func:`last_layer_of`).
    input_ids, attention_mask : Tensor (int64), shape (batch, length)
        A padded batch; ``attention_mask`` is 1 at real tokens.
    rows, cols : Tensor (int64), shape (n_positions,)
        The selected positions, in any order.
    max_per_row : int, optional
        The most positions selected in one row, when the caller knows it (from the host
        arrays it built ``rows`` from): reading it from the device would make the host
        wait for the GPU at every batch.
    """
    h = _last_layer_input(encoder, last, input_ids, attention_mask)
    att = last.attention.self
    batch, length, _ = h.shape
    heads, size = att.num_attention_heads, att.attention_head_size
    # per-row counts by index_add_ (torch.bincount on CUDA reads the input's maximum back to the host)
    counts = torch.zeros(batch, dtype=rows.dtype, device=rows.device).index_add_(0, rows, torch.ones_like(rows))
    order = torch.argsort(rows, stable=True)
    slot = torch.empty_like(rows)  # each position's query slot within its row
    slot[order] = torch.arange(len(rows), device=rows.device) - (torch.cumsum(counts, 0) - counts)[rows[order]]
    selected = h[rows, cols]
    queries = att.query(selected)  # under autocast: in the compute type, which k and v share
    q = queries.new_zeros(batch, int(counts.max()) if max_per_row is None else max_per_row, heads * size)
    q[rows, slot] = queries
    q = q.view(batch, -1, heads, size).transpose(1, 2)
    k = att.key(h).view(batch, length, heads, size).transpose(1, 2)
    v = att.value(h).view(batch, length, heads, size).transpose(1, 2)
    keys = attention_mask.bool()[:, None, None, :]
    context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keys, scale=att.scaling)
    context = context.transpose(1, 2).reshape(batch, -1, heads * size)[rows, slot]
    attended = last.attention.output(context, selected)
    return last.output(last.intermediate(attended), attended)
