"""Frozen configuration dataclasses, validated once at the boundary.

Every config serialises with :func:`dataclasses.asdict` and is rebuilt with
``from_dict``, which rejects unknown keys (a typo is an error, not a silent
default). Definitions and defaults follow ``docs/method.md`` and
Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked Language
Models Using Membership Inference Attacks", EMNLP.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "SignalConfig",
    "NeighbourhoodConfig",
    "MetricConfig",
    "AuditConfig",
    "config_digest",
]

SIGNAL_KINDS = ("energy", "pll")
DEFAULT_FPRS = (0.1, 0.01, 0.001)


def _from_dict(cls, data: Mapping[str, Any]):
    """Build a dataclass from a mapping, rejecting unknown keys."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}.from_dict expects a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} key(s) {unknown}; valid keys are {sorted(names)}"
        )
    return cls(**dict(data))


def record_digest(record) -> str:
    """A short, stable sha256 digest (16 hex) of a JSON-able record (sorted keys; other values as ``str``)."""
    payload = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def config_digest(obj) -> str:
    """A short, stable sha256 digest of a config dataclass (sorted-key JSON)."""
    return record_digest(dataclasses.asdict(obj))


@dataclass(frozen=True)
class SignalConfig:
    """How per-sample signals are computed from a masked language model.

    Attributes
    ----------
    kind : {"energy", "pll"}
        ``"energy"``: Eq. 2 of Mireshghallah et al. (2022), the sum of masked-token
        negative log-likelihoods (nats) over ``ceil(mask_rate * T)`` masked positions,
        averaged over ``num_masks`` random masks. ``"pll"``: the pseudo-log-likelihood
        "normalized energy" of appendix A.3.2, every maskable token masked once, the
        mean NLL per token (nats/token).
    num_masks : int
        K, the number of random mask subsets per sample (paper appendix: 10). When
        ``num_masks >= C(T, l)`` every subset is used exactly once, so the energy is
        exactly Eq. 2. Ignored for ``pll``.
    mask_rate : float
        Fraction of maskable tokens masked in each subset, in (0, 1]; ``l = ceil(rate*T)``.
    seed : int
        Masks are drawn from ``(seed, sha256(text))``: reproducible, independent of
        batch order, and identical for two models whose tokenizers agree.
    max_length : int or None
        Token limit including special tokens; ``None`` uses the model's limit. Longer
        texts are truncated (never windowed); the count is reported.
    token_budget : int or None
        Padded tokens per forward pass (batch size x padded length). ``None`` picks
        by device: 1024 on CPU, where 512 to 8192 run at the same speed and the
        working set (and so peak memory) grows with the budget
        (``benchmarks/bench_energy.py``); 16384 on CUDA, where larger batches keep
        the GPU busy (a starting point, not measured here).
    half_precision : bool
        Run the model in float16 on CUDA (ignored on CPU).
    energy_reduction : {"sum", "mean"}
        How the masked tokens' NLLs of one mask combine (``kind="energy"`` only).
        ``"sum"``: Eq. 2, the sum over the ``l`` masked positions (nats; grows with
        the text's length), averaged over masks. ``"mean"``: that sum divided by
        ``l``, averaged over masks (nats per masked token; the reading of the
        paper's appendix A.3.2, "loss ... averaging over 10 times"). The PLL is a
        per-token mean already and ignores this setting.
    """

    kind: str = "energy"
    num_masks: int = 10
    mask_rate: float = 0.15
    seed: int = 0
    max_length: int | None = None
    token_budget: int | None = None
    half_precision: bool = False
    energy_reduction: str = "sum"

    def __post_init__(self):
        if self.energy_reduction not in ("sum", "mean"):
            raise ValueError(f"energy_reduction must be 'sum' (Eq. 2) or 'mean' (per masked token), "
                             f"got {self.energy_reduction!r}")
        if self.kind not in SIGNAL_KINDS:
            raise ValueError(f"signal kind must be one of {SIGNAL_KINDS}, got {self.kind!r}")
        if isinstance(self.num_masks, bool) or not isinstance(self.num_masks, int) or self.num_masks < 1:
            raise ValueError(f"num_masks must be a positive int, got {self.num_masks!r}")
        if not (isinstance(self.mask_rate, (int, float)) and 0.0 < self.mask_rate <= 1.0):
            raise ValueError(f"mask_rate must be in (0, 1], got {self.mask_rate!r}")
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length < 3):
            raise ValueError(f"max_length must be an int >= 3 or None, got {self.max_length!r}")
        if self.token_budget is not None and (isinstance(self.token_budget, bool) or
                                              not isinstance(self.token_budget, int) or self.token_budget < 16):
            raise ValueError(f"token_budget must be an int >= 16 or None (by device), got {self.token_budget!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SignalConfig":
        return _from_dict(cls, data)

    def cache_spec(self) -> dict:
        """The fields that change signal values (not speed): part of every cache key."""
        spec = {"kind": self.kind, "max_length": self.max_length}
        if self.kind == "energy":
            spec.update(num_masks=self.num_masks, mask_rate=self.mask_rate, seed=self.seed)
        if self.half_precision:  # float16 on CUDA changes the values
            spec["half_precision"] = True
        if self.kind == "energy" and self.energy_reduction != "sum":  # "sum" keeps the keys of earlier caches
            spec["energy_reduction"] = self.energy_reduction
        return spec


@dataclass(frozen=True)
class NeighbourhoodConfig:
    """Settings of the neighbourhood attack (Mattern et al., 2023, Sec. 3).

    Attributes
    ----------
    num_neighbours : int
        n, neighbours kept per sample (paper: up to 100; default 25).
    num_replacements : int
        Words replaced per neighbour (paper: 1 works best).
    dropout : float
        Dropout probability applied to the input embedding of the replaced position only.
    generator_model : str or None
        Model that proposes replacements; ``None`` uses the reference model.
    shared_masks : bool
        With the energy signal, draw each neighbour's K masks from its *sample's*
        key, so a neighbour of equal token count is masked where its sample is and
        the score compares like with like (common random numbers). False draws them
        from the neighbour's own text, as for any other text. No effect on PLL.
    """

    num_neighbours: int = 25
    num_replacements: int = 1
    dropout: float = 0.7
    generator_model: str | None = None
    shared_masks: bool = True

    def __post_init__(self):
        if not isinstance(self.num_neighbours, int) or self.num_neighbours < 1:
            raise ValueError(f"num_neighbours must be a positive int, got {self.num_neighbours!r}")
        if not isinstance(self.num_replacements, int) or self.num_replacements < 1:
            raise ValueError(f"num_replacements must be a positive int, got {self.num_replacements!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "NeighbourhoodConfig":
        return _from_dict(cls, data)


@dataclass(frozen=True)
class MetricConfig:
    """Which metrics an audit reports.

    Attributes
    ----------
    fprs : tuple of float
        Target false-positive rates alpha; thresholds are the ``1 - alpha`` quantiles
        of the population scores.
    bootstrap_rounds : int
        Resamples of the target pool for confidence intervals (0 disables them).
    confidence : float
        Two-sided confidence level of the bootstrap percentile intervals, and the
        (family-wise) confidence of the empirical epsilon lower bound
        (``mlflow_mia.metrics.epsilon``).
    delta : float
        The delta of the (eps, delta)-DP guarantee that the empirical epsilon lower
        bound is computed against, in [0, 1) (default 1e-5).
    length_bins : tuple of (int, int)
        Half-open token-length bins ``[lo, hi)`` of the length breakdown (paper Table 3).
    min_k_fraction : float
        k of the min-k% attack: the fraction of lowest token log-probs averaged.
    top_records : int
        How many riskiest member records to report.
    seed : int
        Seed of the bootstrap.
    """

    fprs: tuple[float, ...] = DEFAULT_FPRS
    bootstrap_rounds: int = 1000
    confidence: float = 0.95
    length_bins: tuple[tuple[int, int], ...] = ((10, 20), (20, 60))
    min_k_fraction: float = 0.2
    top_records: int = 20
    seed: int = 0
    delta: float = 1e-5

    def __post_init__(self):
        fprs = tuple(float(a) for a in self.fprs)
        if not fprs or any(not (0.0 < a < 1.0) or math.isnan(a) for a in fprs):
            raise ValueError(f"fprs must be a non-empty list of rates in (0, 1), got {self.fprs!r}")
        object.__setattr__(self, "fprs", tuple(sorted(set(fprs), reverse=True)))
        bins = tuple((int(lo), int(hi)) for lo, hi in self.length_bins)
        if any(lo < 0 or hi <= lo for lo, hi in bins):
            raise ValueError(f"length_bins must be (lo, hi) pairs with 0 <= lo < hi, got {self.length_bins!r}")
        object.__setattr__(self, "length_bins", bins)
        if not isinstance(self.bootstrap_rounds, int) or self.bootstrap_rounds < 0:
            raise ValueError(f"bootstrap_rounds must be an int >= 0, got {self.bootstrap_rounds!r}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence!r}")
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not 0.0 <= self.delta < 1.0:
            raise ValueError(f"delta must be a number in [0, 1), e.g. 1e-5, got {self.delta!r}")
        if not 0.0 < self.min_k_fraction <= 1.0:
            raise ValueError(f"min_k_fraction must be in (0, 1], got {self.min_k_fraction!r}")
        if not isinstance(self.top_records, int) or self.top_records < 0:
            raise ValueError(f"top_records must be an int >= 0, got {self.top_records!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MetricConfig":
        return _from_dict(cls, data)


@dataclass(frozen=True)
class AuditConfig:
    """Everything that defines an audit, stored next to its results.

    Attributes
    ----------
    attacks : tuple of str
        Registry names of the attacks to run (see ``mlflow_mia.attacks.ATTACKS``).
    signal : SignalConfig
    metrics : MetricConfig
    neighbourhood : NeighbourhoodConfig
    allow_tokenizer_mismatch : bool
        Run attacks that need a reference model even when its tokenizer differs
        from the target's (default False: an error). Requires ``signal.kind="pll"``:
        the energy sums the NLL over ``ceil(0.15 T)`` masked tokens, so under two
        tokenisations it sums different numbers of different units, while the PLL
        is a mean NLL per token of each model's own tokenisation, roughly comparable
        across tokenizers (still not exactly: the ratio then also measures how the
        tokenizers split the text). The audit warns when it runs this way.
    """

    attacks: tuple[str, ...] = ("loss", "likelihood_ratio")
    signal: SignalConfig = field(default_factory=SignalConfig)
    metrics: MetricConfig = field(default_factory=MetricConfig)
    neighbourhood: NeighbourhoodConfig = field(default_factory=NeighbourhoodConfig)
    allow_tokenizer_mismatch: bool = False

    def __post_init__(self):
        if isinstance(self.attacks, str):
            object.__setattr__(self, "attacks", (self.attacks,))
        attacks = tuple(dict.fromkeys(str(a) for a in self.attacks))
        if not attacks:
            raise ValueError("attacks must name at least one attack, e.g. ['loss', 'likelihood_ratio']")
        object.__setattr__(self, "attacks", attacks)
        for name, typ in (("signal", SignalConfig), ("metrics", MetricConfig),
                          ("neighbourhood", NeighbourhoodConfig)):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, typ.from_dict(value))
            elif not isinstance(value, typ):
                raise TypeError(f"{name} must be a {typ.__name__} or a dict, got {type(value).__name__}")
        if not isinstance(self.allow_tokenizer_mismatch, bool):
            raise ValueError(f"allow_tokenizer_mismatch must be True or False, got {self.allow_tokenizer_mismatch!r}")
        if self.allow_tokenizer_mismatch and self.signal.kind != "pll":
            raise ValueError("allow_tokenizer_mismatch=True requires signal='pll': energies summed over masked "
                             "tokens of two different tokenisations are not comparable; per-token PLLs roughly are")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AuditConfig":
        return _from_dict(cls, data)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
