"""Where and how fast models run: device, compute type, token budgets, host copies, the token limit, heap trimming.

Process-level concerns of the signals layer, kept apart from the arithmetic of
:mod:`mlflow_mia.signals.energy` and :mod:`mlflow_mia.signals.neighbours`.

The GPU path (issue 45), each part a function here used by every signal loop:

* :func:`resolve_dtype`: ``dtype="auto"`` is bfloat16 on a CUDA device that supports
  it, float32 elsewhere (log-sum-exp and log-softmax stay float32 either way);
* :func:`autocast_for`: the one place the compute precision is set, autocast for a
  lower type and, for float32 on CUDA, TF32 matrix products (``MLFLOW_MIA_TF32=0``
  turns TF32 off; :func:`tf32_enabled`);
* :func:`default_token_budget`: on CUDA, sized to the device's free memory and the
  model's width per token in the compute type (:func:`memory_token_budget`);
* :func:`uses_length_buckets`: padded widths rounded to length buckets on CUDA
  (:func:`mlflow_mia.signals.batching.bucket_width`);
* :func:`to_device` and :class:`DeviceResults`: inputs through pinned memory, results
  kept on the device and copied back once per chunk, so no batch waits for the GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

import numpy as np
import torch

__all__ = ["resolve_dtype", "resolve_device", "default_token_budget", "uses_length_buckets", "token_limit"]


#: Torch device types an audit runs its models on.
DEVICE_TYPES = ("cpu", "cuda", "mps")


def resolve_device(device=None) -> torch.device:
    """``device`` if given, else CUDA when available, else CPU; a given device is checked to exist.

    Cheap (no CUDA context for a CPU device), so callers check it before any model loads.

    Raises
    ------
    ValueError
        ``device`` is not a torch device (``"banana"``), is not one of :data:`DEVICE_TYPES`
        (``"meta"``, which holds no data, ``"xla"``), names CUDA where there is none or a CUDA
        index this machine lacks (``"cuda:7"``), or MPS where it is unavailable.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a torch device ({exc}); use 'cpu', 'cuda' or "
                         "'cuda:<index>'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine; use device='cpu' "
                             "(or leave it unset)")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            listed = ", ".join(f"cuda:{i}" for i in range(count))
            raise ValueError(f"device {device!r}: this machine has {count} CUDA device(s) ({listed})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available on this machine; use device='cpu'")
    elif dev.type not in DEVICE_TYPES:
        # 'meta' holds no data (every signal would be empty), and other backends (xla, xpu, ...) are untested
        raise ValueError(f"device {device!r} is not one the models run on here; use one of 'cpu', 'cuda', "
                         "'cuda:<index>' or 'mps'")
    return dev


def resolve_dtype(name: str | None, device) -> torch.dtype:
    """The compute type of :attr:`~mlflow_mia.config.SignalConfig.dtype` ``name`` on ``device``.

    ``"auto"`` (or None): bfloat16 on a CUDA device that supports it, else float32.

    Raises
    ------
    ValueError
        An unknown name.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if name in (None, "auto"):
        bf16 = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    types = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in types:
        raise ValueError(f"dtype {name!r} is not one of auto, {', '.join(types)}")
    return types[name]


#: Environment variable that turns TF32 matrix products for float32 on CUDA off when set to ``0``.
TF32_ENV = "MLFLOW_MIA_TF32"


def tf32_enabled() -> bool:
    """Whether float32 matrix products on CUDA may use TF32 (default yes; ``MLFLOW_MIA_TF32=0``: no).

    TF32 rounds the inputs of float32 products to 10 bits of mantissa (as float16) and
    accumulates in float32: on an H200 a float32 energy call ran 1.6x faster with it
    (493 -> 774 texts/s, issue 45). It is part of the cache key
    (:func:`dtype_setting`), so a run with it off never reads rows computed with it on.
    """
    return os.environ.get(TF32_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _uses_tf32(dtype: torch.dtype, device: torch.device) -> bool:
    return dtype == torch.float32 and device.type == "cuda" and tf32_enabled()


@contextlib.contextmanager
def autocast_for(dtype: torch.dtype, device: torch.device):
    """The compute precision of a signal loop: the one place it is set.

    A lower ``dtype``: ``torch.autocast`` of it on ``device`` (the models' products in
    that type; the callers take log-sum-exp and log-softmax in float32). float32: no
    autocast; on CUDA, TF32 matrix products (``torch.backends.cuda.matmul.allow_tf32``
    and cuDNN's) unless :func:`tf32_enabled` says no, restored on exit so code around an
    audit keeps its own setting.
    """
    device = torch.device(device)
    if dtype != torch.float32:
        with torch.autocast(device_type=device.type, dtype=dtype):
            yield
        return
    if not _uses_tf32(dtype, device):
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def dtype_setting(name: str | None, device) -> dict:
    """The cache-key part of the compute type: empty for float32 (earlier caches keep their keys).

    float32 on CUDA with TF32 products (:func:`tf32_enabled`) is ``{"dtype": "tf32"}``:
    its values differ from float32's by about TF32's rounding, 1e-3 relative.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    dtype = resolve_dtype(name, device)
    if _uses_tf32(dtype, device):
        return {"dtype": "tf32"}
    return {} if dtype == torch.float32 else {"dtype": str(dtype).removeprefix("torch.")}


# Padded tokens per forward pass when SignalConfig.token_budget is None. On CPU,
# budgets of 512 to 8192 measured the same speed while the working set grows with
# the budget; the CUDA value is a starting point for a mid-size GPU.
TOKEN_BUDGETS = {"cpu": 1024, "cuda": 16384}
# The PLL's copies (one per token of a sentence) are short and of one length per sentence; on a
# shared 2-core CPU its passes ran 1.5x faster at 4096 padded tokens than at 1024 (alternated,
# benchmarks/bench_pll.py's MiniLM shape): the encoder's products get 4x the rows.
PLL_TOKEN_BUDGETS = {"cpu": 4096}


# On CUDA without a given budget: the share of the free memory a batch's working set may take, and the range
# of the budget. 16,384 tokens was too small for bf16 on an H200 (masked energy, BERT-base shape: 295 -> 462 ->
# 640 texts/s at 16k -> 65k -> 262k tokens, issue 45); above 262,144 nothing was measured.
CUDA_MEMORY_SHARE = 0.5
CUDA_BUDGET_RANGE = (16384, 262144)


def bytes_per_token(config, dtype: torch.dtype = torch.float32, *, vocab_logits: bool = False) -> int:
    """Device bytes a batch's working set takes per padded token, from the model's config (an upper estimate).

    ``2 x itemsize x (6 hidden + 3 intermediate)``: a layer's live tensors under
    ``inference_mode`` (input, queries, keys, values, attention output, residual; the
    feed-forward's up, gate and activation) with a factor 2 for the allocator's
    rounding and the kernels' workspaces. ``vocab_logits``: the model's full logits are
    held too (heads that are not a plain projection), ``vocabulary x itemsize`` more.
    Defaults where the config lacks a field: hidden 768, intermediate 4 x hidden.
    """
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 768)
    inner = int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden)
    size = torch.empty((), dtype=dtype).element_size()
    total = 2 * size * (6 * hidden + 3 * inner)
    if vocab_logits:
        total += size * int(getattr(config, "vocab_size", None) or 32000)
    return total


def memory_token_budget(free_bytes: int, per_token: int, *, share: float = CUDA_MEMORY_SHARE,
                        bounds: tuple[int, int] = CUDA_BUDGET_RANGE) -> int:
    """Padded tokens per pass for ``free_bytes`` of device memory at ``per_token`` bytes each.

    ``share`` of the free memory over the bytes per token, rounded down to a power of
    two (so budgets, and the batch shapes they give, repeat between runs) and kept in
    ``bounds``.

    >>> memory_token_budget(80 << 30, 55296), memory_token_budget(8 << 30, 110592)
    (262144, 32768)
    >>> memory_token_budget(1 << 30, 1 << 20)
    16384
    """
    low, high = bounds
    tokens = int(share * free_bytes) // max(1, int(per_token))
    if tokens < 1:
        return low
    return int(min(high, max(low, 1 << (tokens.bit_length() - 1))))


def default_token_budget(device, kind: str = "energy", *, model=None, dtype: torch.dtype = torch.float32,
                         vocab_logits: bool = False, table: dict | None = None) -> int:
    """Padded tokens per forward pass on ``device`` (``torch.device`` or str) for signal ``kind``.

    On CUDA with ``model`` (already on the device): :func:`memory_token_budget` of the
    device's free memory (``torch.cuda.mem_get_info`` plus what torch's allocator holds
    unused) at :func:`bytes_per_token` of the model's config in ``dtype``. Otherwise
    ``table`` (default ``TOKEN_BUDGETS``, or ``PLL_TOKEN_BUDGETS`` for ``kind="pll"``
    where it names the device type), so CPU budgets are those measured on CPU.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and model is not None:
        free, _ = torch.cuda.mem_get_info(dev)
        free += torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        per_token = bytes_per_token(getattr(model, "config", None), dtype, vocab_logits=vocab_logits)
        return memory_token_budget(free, per_token)
    if table is None and kind == "pll" and dev.type in PLL_TOKEN_BUDGETS:
        return PLL_TOKEN_BUDGETS[dev.type]
    table = table or TOKEN_BUDGETS
    return table.get(dev.type, table["cpu"])


def uses_length_buckets(device) -> bool:
    """Whether padded widths are rounded to length buckets on ``device``: on CUDA, yes.

    On CUDA the kernels' per-shape plans dominate short batches (issue 45); on CPU the
    extra padding (up to 12.5 %) would only cost time, and the values are the same either
    way (padding is masked; ``tests/signals/test_gpu_path.py``).
    """
    return torch.device(device).type == "cuda"


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device``; on CUDA through pinned memory, without waiting for the copy.

    The pinned block comes from torch's caching host allocator, which keeps it until
    the copy is done, so ``array`` may change right after. On CPU: ``torch.from_numpy``
    (no copy).
    """
    tensor = torch.from_numpy(array)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class DeviceResults:
    """Per-batch result tensors kept on the device, copied to the host once (:meth:`to_host`).

    Copying each batch's results back (``.cpu()``) makes the host wait for the GPU
    after every batch, through pageable memory (37 % of the GPU's time of a bf16 energy
    call on an H200, issue 45). Here batches queue their results; :meth:`to_host`
    concatenates them on the device, copies them once into pinned memory
    (``non_blocking``) and waits once. On CPU the same calls are a concatenation.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._parts: list[tuple[object, torch.Tensor]] = []

    def add(self, tag, values: torch.Tensor) -> None:
        """Keep ``values`` (rows along the first axis) with ``tag`` (what the caller needs to place them)."""
        self._parts.append((tag, values))

    def __len__(self) -> int:
        return len(self._parts)

    def to_host(self) -> list[tuple[object, np.ndarray]]:
        """``(tag, values as ndarray)`` of every part, in the order added; empties the list."""
        if not self._parts:
            return []
        tags, parts = zip(*self._parts)
        self._parts = []
        flat = torch.cat(parts) if len(parts) > 1 else parts[0]
        if flat.device.type == "cuda":
            host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            torch.cuda.current_stream(flat.device).synchronize()
        else:
            host = flat.cpu()
        array = host.numpy()
        out, offset = [], 0
        for tag, part in zip(tags, parts):
            out.append((tag, array[offset:offset + len(part)]))
            offset += len(part)
        return out


# Padded tokens per generator pass when none is given. Each copy needs the full
# vocabulary at one position, so the head's matrix product has one row per copy:
# larger batches than the energy's CPU default keep it efficient
# (benchmarks/bench_neighbours.py was measured with this value).
NEIGHBOUR_TOKEN_BUDGET = 4096


def token_limit(requested: int | None, model_limit: int) -> int:
    """Tokens per text, special tokens included: ``requested`` clamped to the model's limit.

    ``None`` (or 0) means the model's own limit.

    >>> token_limit(None, 512), token_limit(128, 512), token_limit(4096, 512)
    (512, 128, 512)
    """
    return min(requested or model_limit, model_limit)


def release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Batches of varying shapes leave the C heap fragmented: without a trim, resident
    memory creeps up (measured about +1 GB over 2,000 sentences with a MiniLM-sized
    model and 4096-token batches). :class:`HeapTrimmer` decides when to call it.
    Forcing large allocations onto ``mmap`` instead keeps memory flat too but costs
    a quarter of the throughput in page faults (``benchmarks/bench_energy.py``).
    """
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        _MALLOC_TRIM = False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _MALLOC_TRIM = getattr(libc, "malloc_trim", False)
        except OSError:
            pass
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


def resident_bytes() -> int | None:
    """Resident memory of this process in bytes (Linux ``/proc/self/statm``), else None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class HeapTrimmer:
    """Keeps resident memory within ``slack`` bytes of its level after the last trim.

    Called after every batch: it trims the heap (:func:`release_free_memory`) when
    resident memory between batches has grown by more than ``slack`` since the last
    trim, so the peak stays near "before + one batch's working set + slack" however
    many batches run. Where resident memory cannot be read it trims whenever the
    batch shape changes. A trim costs a few milliseconds; checking costs microseconds.
    """

    def __init__(self, slack: int = 64 << 20, *, rss=resident_bytes, trim=None):
        self.slack = slack
        self._rss = rss
        self._trim = trim or release_free_memory
        self._floor = rss()
        self._shape = None

    def after_batch(self, shape) -> bool:
        """Trim if needed after a batch of ``shape``; True when it trimmed."""
        now = self._rss()
        if now is None:
            trim = shape != self._shape
        else:
            trim = self._floor is None or now > self._floor + self.slack
        self._shape = shape
        if trim:
            self._trim()
            self._floor = self._rss()
        return trim
