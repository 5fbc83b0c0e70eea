"""The settings of a membership audit as MLflow params: each once, under its option's name, only where it applies.

MLflow's compare view opens its parallel-coordinates plot on a run's params, and ``mlflow run``
logs the MLproject parameters of the command under their own names (``attacks``, ``seed``,
...) before the audit starts. So the audit's params (:func:`setting_params`) are named by the
options' flat keys (the names of the CLI flags, evaluator keys and MLproject parameters:
``signal``, ``num_masks``, ``bootstrap_rounds``; ``docs/reference/options.md``), not by their
place in :class:`~mlflow_mia.config.AuditConfig`, and :func:`new_params` leaves out a param the
run already holds with the same value. Settings that do not apply to the audit are left out:

- the masking settings ``num_masks`` and ``mask_rate`` apply to a masked LM's signals that draw
  masks (not ``pll``, which masks every token once, nor a causal LM's), ``energy_reduction`` to
  ``signal=energy`` only;
- an attack's own settings (``min_k_fraction``, ``rmia_gamma``, ...) apply when it runs;
  the neighbourhood settings when a neighbourhood attack runs;
- an unset setting (``max_length`` = the model's limit) is not a value to compare.

Digests (of the pool, the population set, a shadow record) identify data; they are run tags
(:func:`digest_tags`), not params, so the plot opens on settings.
"""

from __future__ import annotations

import dataclasses
import math

from mlflow_mia.attacks import ATTACKS
from mlflow_mia.option import declared_options, same_option_fields
from mlflow_mia.signal_kinds import signal_kind

__all__ = ["new_params", "digest_tags"]

#: Run tags of digests are named ``mia.<param name>``: ``mia.pool.digest``, ``mia.shadow_record.digest``.
DIGEST_TAG_PREFIX = "mia."
#: Signal settings and the signal kinds they apply to (a predicate on the kind's name).
_SIGNAL_ONLY = {"num_masks": lambda kind: _masks(kind), "mask_rate": lambda kind: _masks(kind),
                "energy_reduction": lambda kind: kind == "energy"}


def _masks(kind: str) -> bool:
    """Whether signal ``kind`` draws random masks: a masked LM's kind other than ``pll`` (every token once)."""
    try:
        return signal_kind(kind).model == "masked" and kind != "pll"
    except ValueError:  # a kind registered in another process: count it as drawing masks
        return True


def param_value(value) -> str:
    """A setting as a param value: a sequence comma-joined (pairs joined by ``-``), ``None`` as ``None``.

    >>> param_value((0.1, 0.01)), param_value(((10, 20), (20, 60))), param_value(True), param_value(1e-05)
    ('0.1,0.01', '10-20,20-60', 'True', '1e-05')
    """
    if isinstance(value, (list, tuple)):
        return ",".join("-".join(str(x) for x in v) if isinstance(v, (list, tuple)) else f"{v}" for v in value)
    return "None" if value is None else str(value)


def _keys(cls) -> dict[str, str]:
    """``{field name: option key}`` of a config class: declared options, fields carrying one, else the name."""
    out = {f.name: f.name for f in dataclasses.fields(cls)}
    out.update(same_option_fields(cls))
    out.update({of.name: key for key, of in declared_options(cls).items()})
    return out


def _attack_options(attacks) -> dict[str, bool]:
    """``{option key: applies}`` of every registered attack's own settings: True when its attack runs."""
    out: dict[str, bool] = {}
    for name, attack in ATTACKS.items():
        for key in declared_options(attack.Settings):
            out[key] = out.get(key, False) or name in attacks
    return out


def setting_params(config) -> dict[str, str]:
    """The params of an :class:`~mlflow_mia.config.AuditConfig`: ``{option key: value}``, each setting once.

    A setting two parts of the config carry (``seed``: the masks and the bootstrap) is one
    param. Left out (see the module docstring): settings of another signal kind, of attacks
    that did not run, the neighbourhood settings without a neighbourhood attack, unset values.

    Parameters
    ----------
    config : AuditConfig
        As the audit ran it (``AuditResult.config``: ``signal="causal"`` for a causal target).

    Returns
    -------
    dict of str to str
        Values as :func:`param_value` writes them.

    Examples
    --------
    >>> from mlflow_mia.config import AuditConfig
    >>> params = setting_params(AuditConfig.from_dict({"signal": {"kind": "pll"}}))
    >>> params["attacks"], params["signal"], "num_masks" in params, "min_k_fraction" in params
    ('loss,likelihood_ratio', 'pll', False, False)
    """
    attacks = tuple(config.attacks)
    applies = _attack_options(attacks)
    kind = config.signal.kind
    out: dict[str, str] = {}
    for part, values in config.to_dict().items():
        if isinstance(values, dict):
            if part == "neighbourhood" and not any(a.startswith("neighbourhood") for a in attacks):
                continue
            keys = _keys(type(getattr(config, part)))
            items = [(keys.get(field, field), value) for field, value in values.items()]
        else:
            items = [(_keys(type(config)).get(part, part), values)]
        for key, value in items:
            if value is None or not applies.get(key, True) or not _SIGNAL_ONLY.get(key, lambda _: True)(kind):
                continue
            out.setdefault(key, param_value(value))
    return out


def _same(a: str, b: str) -> bool:
    """Whether two param values are one setting: equal text, or equal numbers element by element (``10`` and
    ``10.0``; ``0.1,0.01`` and ``0.1, 0.01``)."""
    if a == b:
        return True
    left, right = str(a).split(","), str(b).split(",")
    if len(left) != len(right):
        return False
    for x, y in zip(left, right):
        x, y = x.strip(), y.strip()
        if x.lower() == y.lower():
            continue
        try:
            if not math.isclose(float(x), float(y), rel_tol=1e-12, abs_tol=0.0):
                return False
        except ValueError:
            return False
    return True


def new_params(params: dict, logged: dict) -> dict[str, str]:
    """``params`` less those the run already holds with the same value (``mlflow run`` logged them).

    A param the run holds with another value (a ``-P attacks=loss`` that a release gate extended, a
    number given as ``10.0``) cannot be logged again under its name (MLflow refuses to change a
    param): a different value is logged as ``effective.<name>``.

    >>> new_params({"seed": "0", "num_masks": "10", "attacks": "loss,rmia"}, {"seed": "0.0", "attacks": "loss"})
    {'num_masks': '10', 'effective.attacks': 'loss,rmia'}
    """
    out = {}
    for key, value in params.items():
        if key not in logged:
            out[key] = value
        elif not _same(logged[key], value):
            out[f"effective.{key}"] = value
    return out


def is_digest(name: str) -> bool:
    """Whether a param name holds a digest (``pool.digest``, ``shadow_record.digest``, ``ner.names_digest``)."""
    return name.endswith(("digest", "_check"))


def digest_tags(params: dict, *, prefix: str = "") -> dict[str, str]:
    """The digests among ``params`` as run tags: ``pool.digest`` -> ``<prefix>mia.pool.digest``.

    >>> digest_tags({"pool.digest": "ab", "pool.n_samples": "160"}, prefix="v1_")
    {'v1_mia.pool.digest': 'ab'}
    """
    return {f"{prefix}{DIGEST_TAG_PREFIX}{k}": str(v) for k, v in params.items() if is_digest(k)}
