"""Which signal a model gets: the registered kind's function, checked against the model's kind.

The one place where stage 1 (every engine, the neighbour values, the canary audit)
computes signals: it looks ``config.kind`` up in the registry of
:mod:`mlflow_mia.signal_kinds` (each signal module registers its kinds: ``energy``
and ``pll`` in :mod:`mlflow_mia.signals.energy`, ``causal`` in
:mod:`mlflow_mia.signals.causal`) and calls its function. A causal LM given the
default ``energy`` gets ``causal`` (the user names nothing extra), and the audit says so
once (:func:`signal_note`, a warning in its report); a kind made for the other kind of
model (:mod:`mlflow_mia.signals.causal_model`) is refused.
:func:`check_model_kinds` refuses an audit whose models are of different kinds,
before any model runs.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence
import numpy as np

from mlflow_mia.config import SignalConfig
from mlflow_mia.signal_kinds import signal_kind, signal_kinds
from mlflow_mia.signals.causal_model import CausalLM, as_language_model, kind_of
from mlflow_mia.signals.energy import value_settings as settings

__all__ = ["compute_signals", "value_settings", "signal_config_for", "signal_note", "check_model_kinds",
           "sequence_values"]

#: Attacks that need a masked target (they re-mask its tokens): refused for a causal target.
MASKED_ONLY_ATTACKS = ("neighbourhood_local",)
#: Attacks whose definition needs a causal target (a text's likelihood after a prefix): refused for a masked one.
CAUSAL_ONLY_ATTACKS = ("recall",)
#: The ``signal`` option's default, and the kind a causal LM gets in its place.
_DEFAULT_KIND = SignalConfig().kind
_CAUSAL_KIND = "causal"


def signal_config_for(lm, config: SignalConfig | None) -> SignalConfig:
    """``config`` as it applies to ``lm``: ``kind="causal"`` for a causal LM given the default.

    A causal LM gets the causal signal when ``config.kind`` is the default ``"energy"``;
    otherwise the kind (any registered one) must be made for the model's kind
    (:attr:`mlflow_mia.signal_kinds.SignalKind.model`).

    Raises
    ------
    ValueError
        ``config.kind`` is not registered (listing the registered kinds); a masked kind
        (e.g. ``"pll"``) for a causal LM (masking is not defined for it), or a causal kind
        for a masked LM; the message names the model's kind and the kinds that fit it.
    """
    config = config or SignalConfig()
    wanted = signal_kind(config.kind)
    model = kind_of(lm)
    if wanted.model == model:
        return config
    fitting = " or ".join(repr(k) for k in signal_kinds(model))
    if model not in ("masked", "causal"):  # a registered kind of its own (mlflow_mia.model_kinds)
        raise ValueError(f"{getattr(lm, 'name', 'the model')} is a {model} model and signal={config.kind!r} is "
                         f"defined for {wanted.model} models; use signal={fitting or 'a kind registered for it'}")
    if model == "causal":
        if config.kind == _DEFAULT_KIND:
            return dataclasses.replace(config, kind=_CAUSAL_KIND)
        raise ValueError(f"{lm.name} is a causal LM and signal={config.kind!r} masks tokens, which only a masked LM "
                         f"predicts; use signal={fitting} (the default picks {_CAUSAL_KIND!r} for a causal model)")
    raise ValueError(f"{getattr(lm, 'name', 'the model')} is a masked LM and signal={config.kind!r} needs a causal LM "
                     f"(AutoModelForCausalLM); use signal={fitting} for a masked LM")


def signal_note(lm, kind: str) -> str | None:
    """The warning an audit gives once when ``lm`` gets its causal signal in place of the masked ``kind`` asked for.

    A causal LM asked for ``energy`` (the membership audit: :func:`signal_config_for`) or any
    masked kind (the canary audit's ranking: :func:`sequence_values`) is scored with its causal
    signal, since masking is not defined for it; the audit says so in one warning (its log and
    its report) rather than silently. None when ``lm`` is not a causal LM or ``kind`` is a causal one.

    Parameters
    ----------
    lm : CausalLM, MaskedLM or None
    kind : str
        The signal kind asked for (``--signal``, evaluator key ``signal``).

    Returns
    -------
    str or None
    """
    if not isinstance(lm, CausalLM) or signal_kind(kind).model == "causal":
        return None
    return (f"{lm.name} is a causal LM: signal={kind!r} masks tokens, which only a masked LM predicts, so its causal "
            f"signal ({_CAUSAL_KIND!r}: the negative log-likelihood of each token given the tokens before it) is "
            f"used instead; give --signal {_CAUSAL_KIND} (evaluator key signal) to ask for it by name")


def compute_signals(lm, texts: Sequence[str], config: SignalConfig | None = None, **kwargs):
    """The signals of ``lm`` on ``texts``: the function registered for ``config.kind``.

    Same parameters and return as :func:`mlflow_mia.signals.energy.compute_signals`
    (``mask_keys`` is ignored for a causal LM: nothing is random there).

    Raises
    ------
    ValueError
        What :func:`signal_config_for` and the signal function raise.
    """
    config = signal_config_for(lm, config)
    return signal_kind(config.kind).compute(lm, texts, config, **kwargs)


def sequence_values(lm, texts: Sequence[str], config: SignalConfig | None = None, **kwargs):
    """One number per text for ranking whole texts (the canary audit's exposure), lower = likelier.

    A masked LM: its signal's values (energy or PLL, as ``config`` asks). A causal LM:
    the log-perplexity of the text in nats, ``-sum_{t=2..n} log p(x_t | x_<t)``, the
    Secret Sharer's own measure (Carlini et al. 2019, Sec. 3; there in bits, the same
    ranking), whatever masked kind ``config`` names (both are masked-LM readings of the
    text's likelihood; the causal LM's is exact and deterministic). A sum, not a mean: two
    candidate secrets whose digits split into different token counts are compared on the
    probability of the whole text.

    Returns
    -------
    ndarray of shape (n_texts,), float64
        Nats (energy, PLL in nats/token, or the causal log-perplexity).
    """
    config = config or SignalConfig()
    if isinstance(lm, CausalLM):
        res = compute_signals(lm, texts, dataclasses.replace(config, kind="causal"), **kwargs)
        return res.values * np.array([len(x) for x in res.token_logprobs], dtype=np.float64)
    return compute_signals(lm, texts, config, **kwargs).values


def value_settings(lm, config: SignalConfig) -> dict:
    """What besides the model decides its signal values (a cache and store key part), for either kind."""
    return settings(lm, signal_config_for(lm, config))


def check_model_kinds(target, references=(), *, attacks: Sequence[str] = (), generator=None) -> None:
    """Refuse models of different kinds in one audit, and attacks the target's kind does not support.

    Parameters
    ----------
    target : CausalLM, MaskedLM or None
    references : sequence of CausalLM or MaskedLM
    attacks : sequence of str
        The audit's attacks.
    generator : optional
        The neighbour generator, when loaded: it must be a masked LM whatever the target.

    Raises
    ------
    ValueError
        A reference of another kind than the target (naming both kinds and the fix),
        a causal target with an attack of :data:`MASKED_ONLY_ATTACKS`, a masked target with one of
        :data:`CAUSAL_ONLY_ATTACKS`, or a causal
        model as neighbour generator.
    """
    if target is None:
        return
    kind = kind_of(target)
    for i, ref in enumerate(references or ()):
        if ref is None or not hasattr(ref, "model"):
            continue
        if kind_of(ref) != kind:
            which = "reference model" if i == 0 else f"reference model {i + 1}"
            raise ValueError(
                f"the target is a {kind} LM but the {which} is a {kind_of(ref)} LM: their signals (causal: mean "
                "NLL per predicted token; masked: masked energy) cannot be compared, and no signal is defined for "
                f"both. Use a {kind} reference model (e.g. the target's public base model, or a {kind} LM trained "
                "on disjoint text), or drop the reference-based attacks (e.g. attacks=['loss', 'zlib', 'min_k', "
                "'min_k_plus_plus'])")
    bad = [a for a in attacks if a in MASKED_ONLY_ATTACKS]
    if kind == "causal" and bad:
        raise ValueError(f"attack(s) {bad} re-mask the target's tokens and need a masked LM target; the target is a "
                         "causal LM: use 'neighbourhood' (neighbours scored by the causal target's loss) instead")
    causal_only = [a for a in attacks if a in CAUSAL_ONLY_ATTACKS]
    if kind == "masked" and causal_only:
        raise ValueError(f"attack(s) {causal_only} need a causal LM target: ReCaLL's LL(x | P) is the left-to-right "
                         "likelihood of a text read after a prefix (Xie et al. 2024, Sec. 3), which a masked LM does "
                         "not define; the target is a masked LM: leave them out")
    if isinstance(generator, CausalLM):
        raise ValueError("the neighbour generator must be a masked LM (Mattern et al. 2023 propose neighbours with "
                         "BERT); the one given is a causal LM. Pass a masked LM as generator / neighbour_generator")
