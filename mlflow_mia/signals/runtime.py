"""Where and how fast models run: device choice, token budgets, the token limit, heap trimming.

Process-level concerns of the signals layer, kept apart from the arithmetic of
:mod:`mlflow_mia.signals.energy` and :mod:`mlflow_mia.signals.neighbours`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch

__all__ = ["resolve_dtype", "autocast_for", "dtype_setting", "resolve_device", "DEVICE_TYPES", "default_token_budget", "TOKEN_BUDGETS", "NEIGHBOUR_TOKEN_BUDGET",
           "token_limit", "release_free_memory", "resident_bytes", "HeapTrimmer"]


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


def autocast_for(dtype: torch.dtype, device: torch.device):
    """``torch.autocast`` of ``dtype`` on ``device`` (disabled for float32: the models run as they are)."""
    if dtype == torch.float32:
        return torch.autocast(device.type if device.type in ("cpu", "cuda") else "cpu", enabled=False)
    return torch.autocast(device_type=device.type, dtype=dtype)


def dtype_setting(name: str | None, device) -> dict:
    """The cache-key part of the compute type: empty for float32 (earlier caches keep their keys)."""
    dtype = resolve_dtype(name, device)
    return {} if dtype == torch.float32 else {"dtype": str(dtype).removeprefix("torch.")}


# Padded tokens per forward pass when SignalConfig.token_budget is None. On CPU,
# budgets of 512 to 8192 measured the same speed while the working set grows with
# the budget; the CUDA value is a starting point for a mid-size GPU.
TOKEN_BUDGETS = {"cpu": 1024, "cuda": 16384}
# The PLL's copies (one per token of a sentence) are short and of one length per sentence; on a
# shared 2-core CPU its passes ran 1.5x faster at 4096 padded tokens than at 1024 (alternated,
# benchmarks/bench_pll.py's MiniLM shape): the encoder's products get 4x the rows.
PLL_TOKEN_BUDGETS = {"cpu": 4096}


def default_token_budget(device, kind: str = "energy") -> int:
    """Padded tokens per forward pass on ``device`` (``torch.device`` or str) for signal ``kind``.

    ``TOKEN_BUDGETS``, or ``PLL_TOKEN_BUDGETS`` for ``kind="pll"`` where it names the device type.
    """
    dev = torch.device(device).type
    if kind == "pll" and dev in PLL_TOKEN_BUDGETS:
        return PLL_TOKEN_BUDGETS[dev]
    return TOKEN_BUDGETS.get(dev, TOKEN_BUDGETS["cpu"])


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
