"""Frozen configuration dataclasses, validated once at the boundary.

Every config serialises with :func:`dataclasses.asdict` and is rebuilt with
``from_dict``, which rejects unknown keys (a typo is an error, not a silent
default). Definitions and defaults follow ``docs/explanations/method.md`` and
Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked Language
Models Using Membership Inference Attacks", EMNLP.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from mlflow_mia.attack_settings import attack_option_owners, build_attack_settings, with_carried
from mlflow_mia.option import check_options, declared_options, option, same_option, shared_option
from mlflow_mia.signal_kinds import SIGNAL_KINDS

__all__ = [
    "SignalConfig",
    "NeighbourhoodConfig",
    "MetricConfig",
    "AuditConfig",
    "NerAuditConfig",
    "ENTITY_TYPE_PATTERN",
    "MIN_FPR",
    "record_digest",
]

ENERGY_REDUCTIONS = ("sum", "mean")
DEFAULT_FPRS = (0.1, 0.01, 0.001)
#: The smallest false-positive rate an audit reads: a threshold at FPR alpha needs ceil(1 / alpha)
#: population texts (:func:`mlflow_mia.metrics.thresholds.min_population_size`), here 10**9. A smaller
#: rate (``--fprs 1e-300``) is refused by the option's declared range, naming it.
MIN_FPR = 1e-9


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


def record_digest(record, *, length: int = 16) -> str:
    """The package's one digest of a settings record: sha256 of its sorted-key JSON.

    Used for every key derived from settings: the signal cache and Spark store keys,
    the analysis experiment and variant keys, the WNUT demo's registry tag.

    Parameters
    ----------
    record : JSON-able object (dict, list, str, numbers, None)
        What the digest identifies. Dict keys are sorted, so key order does not
        matter; values JSON cannot encode are written as ``str(value)``.
    length : int, default 16
        Hex characters kept (4 bits each), from 1 to 64.

    Returns
    -------
    str
        The first ``length`` hex digits of ``sha256(json.dumps(record, sort_keys=True))``.

    Raises
    ------
    ValueError
        ``length`` outside 1..64.

    Examples
    --------
    >>> record_digest({"a": 1, "b": [1, 2]})
    'e6f20bdc3757e5e7'
    >>> record_digest({"b": [1, 2], "a": 1}, length=8)
    'e6f20bdc'
    """
    if not 1 <= length <= 64:
        raise ValueError(f"length must be 1..64 hex characters, got {length}")
    payload = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


#: Compute types of :attr:`SignalConfig.dtype` (resolved by :func:`mlflow_mia.signals.runtime.resolve_dtype`).
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SignalConfig:
    """How per-sample signals are computed from a masked language model.

    Each field declared with :func:`~mlflow_mia.option.option` is a user option
    (flat key, CLI flag, MLproject parameter); ``__post_init__`` checks the declared ranges.

    Attributes
    ----------
    kind : {"energy", "pll", "causal"} or another registered kind
        ``"energy"``: Eq. 2 of Mireshghallah et al. (2022), the sum of masked-token
        negative log-likelihoods (nats) over ``ceil(mask_rate * T)`` masked positions,
        averaged over ``num_masks`` random masks. ``"pll"``: the pseudo-log-likelihood
        "normalized energy" of appendix A.3.2, every maskable token masked once, the
        mean NLL per token (nats/token). ``"causal"``: for a causal LM, the mean NLL per
        predicted token, tokens 2..n given those before them (nats/token;
        :mod:`mlflow_mia.signals.causal`); an audit picks it for a causal target. The
        choices are read from :mod:`mlflow_mia.signal_kinds` (every registered kind).
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
        (``benchmarks/bench_energy.py``); on CUDA, half the device's free memory
        over an upper estimate of the bytes per padded token, between 16,384 and
        262,144 (:func:`~mlflow_mia.signals.runtime.default_token_budget`). A batch
        that runs out of memory is halved and retried either way.
    dtype : {"auto", "float32", "bfloat16", "float16"}
        The floating-point type the models compute in (``torch.autocast`` over their
        matrix products; log-softmax and every statistic stay float32). ``"auto"``:
        bfloat16 on a CUDA device that supports it, else float32 (so CPU values are
        unchanged). Part of the cache key when it is not float32 on the device used.
        Replaces ``half_precision`` (float16 on CUDA).
    energy_reduction : {"sum", "mean"}
        How the masked tokens' NLLs of one mask combine (``kind="energy"`` only).
        ``"sum"``: Eq. 2, the sum over the ``l`` masked positions (nats; grows with
        the text's length), averaged over masks. ``"mean"``: that sum divided by
        ``l``, averaged over masks (nats per masked token; the reading of the
        paper's appendix A.3.2, "loss ... averaging over 10 times"). The PLL is a
        per-token mean already and ignores this setting. Part of the cache key only
        when not ``"sum"``, so earlier cache entries keep their keys.
    """

    kind: str = option("energy", "energy: masked energy over num_masks random masks; pll: "
                       "pseudo-log-likelihood, every token masked once; causal: mean NLL per predicted token of a "
                       "causal LM (picked for causal models); any other kind registered with "
                       "mlflow_mia.signal_kinds (described in its own module)", key="signal", choices=SIGNAL_KINDS)
    num_masks: int = option(10, "K, random masks per text for the energy", ge=1, metavar="K")
    mask_rate: float = option(0.15, "fraction of the maskable tokens masked in each mask", gt=0, le=1, metavar="R")
    seed: int = option(0, "seed of the audit's random draws: the masks and the bootstrap; for the NER audit the "
                       "dev/test split, Mix-PT and the bootstrap; for the canary audit also the candidate samples and "
                       "the guesses' tie-breaks", ge=0)
    max_length: int | None = option(None, "token limit per text including special tokens; longer texts are "
                                    "truncated and counted", ge=3, unset=(0,), metavar="N",
                                    default_doc="the model's limit (0 also means that)")
    token_budget: int | None = option(None, "padded tokens per forward pass, batch size x padded length; lower it "
                                      "if memory runs out", ge=16, metavar="N",
                                      default_doc="1024 on CPU (4096 for the PLL, 16384 for the NER audit's "
                                                  "confidences); on CUDA sized to the device's free memory")
    dtype: str = option("auto", "floating-point type of the models' matrix products: auto (bfloat16 on a CUDA "
                        "device that supports it, else float32), float32, bfloat16 or float16; log-softmax stays "
                        "float32", choices=DTYPES)
    energy_reduction: str = option("sum", "how one mask's energy combines its masked tokens' NLLs: sum (Eq. 2) "
                                   "or mean (per masked token)", choices=ENERGY_REDUCTIONS)

    def __post_init__(self):
        check_options(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SignalConfig":
        return _from_dict(cls, data)

    def cache_spec(self) -> dict:
        """The fields that change signal values (not speed): part of every cache key."""
        spec = {"kind": self.kind, "max_length": self.max_length}
        if self.kind == "energy":
            spec.update(num_masks=self.num_masks, mask_rate=self.mask_rate, seed=self.seed)
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

    num_neighbours: int = option(25, "neighbours per text for the neighbourhood attack", ge=1, metavar="N")
    num_replacements: int = 1
    dropout: float = 0.7
    generator_model: str | None = option(None, "model proposing neighbour words: a model URI or folder",
                                         key="neighbour_generator", default_doc="the reference model",
                                         metavar="URI")
    shared_masks: bool = True

    def __post_init__(self):
        check_options(self)
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
        Target false-positive rates alpha in [:data:`MIN_FPR`, 1); thresholds are the
        ``1 - alpha`` quantiles of the population scores.
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
    top_records : int
        How many riskiest member records to report.
    seed : int
        Seed of the bootstrap.
    """

    fprs: tuple[float, ...] = option(DEFAULT_FPRS, "false-positive rates alpha at which TPR, precision and "
                                     "recall are reported; the population needs at least 1/min(fprs) texts (NER: "
                                     "thresholds from the dev out-of-sample names; canaries: the TPR of included vs "
                                     "excluded canaries)", ge=MIN_FPR, lt=1, metavar="A,B")
    bootstrap_rounds: int = option(1000, "bootstrap resamples for the confidence intervals, of the target pool (NER: "
                                   "of the names, for the M-MEM intervals; canaries: of the canaries by inclusion "
                                   "bit); 0 = none", ge=0, metavar="N")
    confidence: float = option(0.95, "two-sided confidence level of the intervals, and the confidence of the "
                               "epsilon lower bound (and of a release gate's bounds)", gt=0, lt=1)
    length_bins: tuple[tuple[int, int], ...] = ((10, 20), (20, 60))
    top_records: int = option(20, "riskiest member records listed per attack", ge=0, metavar="N")
    seed: int = same_option("seed", 0)
    delta: float = option(1e-5, "delta of the (eps, delta)-DP guarantee behind the empirical epsilon lower bound",
                          ge=0, lt=1, metavar="D")

    def __post_init__(self):
        if isinstance(self.fprs, (list, tuple)) and all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                                        for a in self.fprs):
            object.__setattr__(self, "fprs", tuple(float(a) for a in self.fprs))
        check_options(self)
        object.__setattr__(self, "fprs", tuple(sorted(set(self.fprs), reverse=True)))
        bins = tuple((int(lo), int(hi)) for lo, hi in self.length_bins)
        if any(lo < 0 or hi <= lo for lo, hi in bins):
            raise ValueError(f"length_bins must be (lo, hi) pairs with 0 <= lo < hi, got {self.length_bins!r}")
        object.__setattr__(self, "length_bins", bins)

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
    attack_settings : mapping of str to Settings
        The settings of every registered attack that declares options (:data:`mlflow_mia.attack_settings.ATTACK_SETTINGS`), by
        attack name: ``{"min_k": MinKSettings(fraction=0.2), ...}``. Give an attack's ``Settings`` or a
        dict of its fields (``{"rmia": {"gamma": 2.0}}``); the others take their declared defaults. A
        ``metrics`` dict may also carry them by option key (``{"min_k_fraction": 0.5}``), as
        :meth:`to_dict` writes them. A ``Settings`` field declared with ``same_option(key, ...)``
        carries this config's value of the option ``key`` (:meth:`option_value`).
    """

    attacks: tuple[str, ...] = option(("loss", "likelihood_ratio"), "attacks to run, by registry name (see "
                                      "mlflow_mia.attacks.ATTACKS)", metavar="A,B")
    signal: SignalConfig = field(default_factory=SignalConfig)
    metrics: MetricConfig = field(default_factory=MetricConfig)
    neighbourhood: NeighbourhoodConfig = field(default_factory=NeighbourhoodConfig)
    allow_tokenizer_mismatch: bool = option(False, "run attacks that need a reference whose tokenizer differs "
                                            "from the target's (else an error); requires signal 'pll', whose "
                                            "per-token energies are roughly comparable across tokenizers")
    attack_settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        flat, owners = {}, attack_option_owners()
        if isinstance(self.metrics, Mapping):  # the attacks' options by key, as to_dict writes them
            flat = {k: v for k, v in self.metrics.items() if k in owners}
            object.__setattr__(self, "metrics", {k: v for k, v in self.metrics.items() if k not in owners})
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
        check_options(self)
        object.__setattr__(self, "attack_settings", build_attack_settings(self.attack_settings, flat, self.option_value))
        if self.allow_tokenizer_mismatch and self.signal.kind != "pll":
            raise ValueError("allow_tokenizer_mismatch=True requires signal='pll': energies summed over masked "
                             "tokens of two different tokenisations are not comparable; per-token PLLs roughly are")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AuditConfig":
        return _from_dict(cls, data)

    def option_value(self, key: str):
        """This config's value of the option ``key``: ``"mask_rate"`` -> ``self.signal.mask_rate``.

        Raises
        ------
        KeyError
            No part of the audit config (itself, ``signal``, ``metrics``, ``neighbourhood``) declares ``key``.
        """
        for part in (self, self.signal, self.metrics, self.neighbourhood):
            of = declared_options(type(part)).get(key)
            if of is not None:
                return getattr(part, of.name)
        raise KeyError(f"{key!r} is not an option of AuditConfig, SignalConfig, MetricConfig or NeighbourhoodConfig")

    def settings_of(self, classes: Mapping[str, type]) -> dict:
        """``{name: settings}`` for each ``name -> Settings class``: its :attr:`attack_settings` entry, else the
        class's defaults with this config's carried values; one call for every attack of an audit (make_attacks)."""
        held = {name: self.attack_settings.get(name) for name in classes}
        return {n: held[n] if isinstance(held[n], c) else with_carried(c(), self.option_value) for n, c in classes.items()}

    def attack_options(self) -> dict:
        """``{option key: value}`` of every attack's options: ``{"min_k_fraction": 0.2, ...}``."""
        return {key: getattr(s, of.name) for s in self.attack_settings.values()
                for key, of in declared_options(type(s)).items()}

    def to_dict(self) -> dict:
        """Plain data; the attacks' options sit under ``metrics`` by key (``metrics.min_k_fraction``, ..., as
        before the attacks declared them; the run params are the keys alone); :meth:`from_dict` reads them back."""
        out = dataclasses.asdict(dataclasses.replace(self, attack_settings={}))
        out.pop("attack_settings")
        out["metrics"].update(self.attack_options())
        return out


#: What an entity type may be called: it names metrics (``ner/<type>/...``), so MLflow's name characters.
ENTITY_TYPE_PATTERN = r"[\w.\- ]+"


@dataclass(frozen=True)
class NerAuditConfig:
    """Settings of :func:`ner_audit`.

    Attributes
    ----------
    entity_types : tuple of str or None
        Types to audit (default: every type of the names table).
    dev_fraction : float
        Share of names per type and class used for dev when the table has no ``split``.
    subword : {"first", "mean"}
    seed : int
        Seeds the dev/test split, Mix-PT and the bootstrap.
    bootstrap_rounds : int
        Resamples of the M-MEM intervals over names (0 = none).
    fprs : tuple of float
        FPRs of the TPR metrics (threshold from the dev out-of-sample names).
    token_removal : bool
        Run the greedy token removal (costs about as many sentences as the prompt set on dev).
    token_budget : int or None
        Padded tokens per forward pass (default by device).
    batch_size : int or None
        Sentences per forward pass instead of a token budget.

    Each field is a user option (flat key of ``method="ner_prompts"``, ``ner-audit`` flag);
    ``seed``, ``bootstrap_rounds``, ``fprs`` and ``token_budget`` are the options declared on
    :class:`SignalConfig` and :class:`MetricConfig` (one declaration each, a token budget of at
    least 16); ``__post_init__`` checks the declared ranges. The default FPRs stop at 0.01: a
    detection set holds tens to hundreds of names per class, too few for 0.001.
    """

    entity_types: tuple[str, ...] | None = option(None, "entity types to audit, comma-separated",
                                                  pattern=ENTITY_TYPE_PATTERN, metavar="A,B",
                                                  pattern_doc="made of letters, digits, _ - . and spaces",
                                                  default_doc="every type of the names table")
    dev_fraction: float = option(0.5, "share of the names per type and class used for dev when the names table "
                                 "has no split", gt=0, lt=1)
    subword: str = option("first", "tokens read per name: the first subword of each word, or every subword",
                          choices=("first", "mean"))
    seed: int = shared_option(SignalConfig, "seed")
    bootstrap_rounds: int = shared_option(MetricConfig, "bootstrap_rounds")
    fprs: tuple[float, ...] = shared_option(MetricConfig, "fprs", (0.1, 0.01))
    token_removal: bool = option(True, "run the greedy token removal (about as many sentences as the prompt set "
                                 "on dev)", flags=("--no-token-removal",), invert=True, mlproject=False,
                                 flag_help="skip the greedy token removal")
    token_budget: int | None = shared_option(SignalConfig, "token_budget")
    batch_size: int | None = option(None, "sentences per forward pass (instead of token_budget)", ge=1,
                                    metavar="N")

    def __post_init__(self):
        for name in ("entity_types", "fprs"):  # lists are kept as tuples (the config is frozen and hashable)
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in self.fprs):
            object.__setattr__(self, "fprs", tuple(float(a) for a in self.fprs))
        check_options(self)

    def to_params(self) -> dict[str, str]:
        return {"ner_subword": self.subword, "ner_dev_fraction": str(self.dev_fraction), "ner_seed": str(self.seed),
                "ner_bootstrap_rounds": str(self.bootstrap_rounds), "ner_fprs": ",".join(map(str, self.fprs)),
                "ner_token_removal": str(self.token_removal)}
