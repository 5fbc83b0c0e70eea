"""Where a model's weights live: on one device, or spread over several by accelerate's ``device_map``.

A model too big for one GPU is loaded with ``device_map="auto"`` (Hugging Face accelerate: its
layers go to every visible GPU in turn, then to CPU memory, then to disk) and runs in place, each
layer's hook moving its inputs to where its weights are. The signal kernels never move such a
model; they send their inputs to the device of its first layer (:func:`place_model`), and its
weights digest is read one module at a time from wherever each lives (:func:`state_items`).

The option that asks for it is ``device_map`` (``--device-map auto``); the loaders read it through
:func:`load_kwargs` inside :func:`loading`, so every front end and every role (target, reference,
base of an adapter) loads the same way without each function passing it on.
"""

from __future__ import annotations

import contextlib
import contextvars
import tempfile
from collections.abc import Iterator

import torch

__all__ = ["check_device_map", "loading", "load_kwargs", "is_dispatched"]

#: The values of the ``device_map`` option (None: the whole model on the audit's device).
DEVICE_MAPS = ("auto",)

_LOAD_KWARGS: contextvars.ContextVar[dict] = contextvars.ContextVar("mlflow_mia_load_kwargs", default={})


def check_device_map(value) -> str:
    """The ``device_map`` option's value, stripped (``"auto"``).

    Raises
    ------
    ValueError
        Not one of :data:`DEVICE_MAPS`.
    """
    device_map = str(value).strip()
    if device_map not in DEVICE_MAPS:
        raise ValueError(f"device_map {device_map!r} is not one of {', '.join(DEVICE_MAPS)}; leave it unset to "
                         "load the whole model on --device")
    return device_map


@contextlib.contextmanager
def loading(device_map: str | dict | None = None, *, offload_folder: str | None = None):
    """Models loaded inside this block are placed by accelerate's ``device_map`` (None: as usual).

    Parameters
    ----------
    device_map : str, dict or None
        ``"auto"`` (the option's one value: every GPU in turn, then CPU memory, then disk), or an
        explicit map of module names to devices (``{"transformer.h.0": 0, "lm_head": "cpu", ...}``,
        ``"disk"`` allowed) as accelerate takes it.
    offload_folder : str, optional
        Where weights offloaded to disk go (kept; the models loaded in the block may outlive it).
        Default: a temporary folder removed when the block ends, so such models are used inside it.

    Raises
    ------
    ValueError
        ``device_map`` is a string other than those of :data:`DEVICE_MAPS`.
    """
    if isinstance(device_map, str):
        device_map = check_device_map(device_map)
    with contextlib.ExitStack() as stack:
        kwargs = {}
        if device_map:
            offload = offload_folder or stack.enter_context(tempfile.TemporaryDirectory(prefix="mlflow_mia_offload_"))
            kwargs = {"device_map": device_map, "offload_folder": offload}
        token = _LOAD_KWARGS.set(kwargs)
        try:
            yield
        finally:
            _LOAD_KWARGS.reset(token)


def load_kwargs() -> dict:
    """The ``from_pretrained`` arguments of the current :func:`loading` block (empty outside one).

    transformers keeps the checkpoint's dtype (``dtype="auto"``, its default since version 5) and
    loads safetensors shard by shard onto their devices, so no second full copy is made.
    """
    return dict(_LOAD_KWARGS.get())


def is_dispatched(model: torch.nn.Module) -> bool:
    """True when accelerate placed ``model`` (a ``device_map`` with a GPU, CPU offload or disk offload).

    A map that puts everything on one device (``{"": "cpu"}``) is not dispatched: the model can move.
    """
    device_map = getattr(model, "hf_device_map", None)
    return bool(device_map) and (len(set(device_map.values())) > 1
                                 or any(v in ("disk", "meta") for v in device_map.values()))


def _as_device(value) -> torch.device:
    return torch.device(f"cuda:{value}" if isinstance(value, int) else value)


def place_model(model: torch.nn.Module, device: torch.device) -> torch.device:
    """Put ``model`` on ``device`` and return the device its inputs go to.

    A dispatched model (:func:`is_dispatched`) stays where accelerate put it; its inputs go to
    the device of its first placed module (accelerate moves them on from layer to layer, and its
    outputs come back to the inputs' device), so ``device`` is then ignored.
    """
    if not is_dispatched(model):
        model.to(device)
        return device
    placed = [v for v in model.hf_device_map.values() if v not in ("disk", "meta")]
    return _as_device(placed[0]) if placed else torch.device("cpu")


def state_items(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor on CPU)`` of every entry of ``model.state_dict()``, sorted by name.

    For a dispatched model with offloaded weights (held on the ``meta`` device between
    forward passes), each module's weights are brought in by its accelerate hook one
    module at a time, so the whole model is never copied at once.
    """
    state = model.state_dict()
    if not any(t.device.type == "meta" for t in state.values()):
        for name in sorted(state):
            yield name, state[name].detach().cpu()
        return
    from accelerate.utils import align_module_device  # only an offloaded model gets here

    for name in sorted(state):
        path, _, local = name.rpartition(".")
        module = model.get_submodule(path) if path else model
        with align_module_device(module, torch.device("cpu")):
            yield name, getattr(module, local).detach().cpu()
