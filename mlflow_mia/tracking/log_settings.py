"""How one audit is logged: :class:`LogSettings`, the one argument :func:`~mlflow_mia.tracking.audit_log.log_audit`
and :func:`~mlflow_mia.tracking.canary_log.log_canary_audit` take besides the result and the run."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["LogSettings"]


@dataclass(frozen=True, kw_only=True)
class LogSettings:
    """What goes into the run and onto the registry version, and what it is logged with.

    The options part comes from an audit's parsed options (:meth:`from_options`); the rest
    is what the pipeline knows about this run (the pool texts, the gate verdict, the target's
    registry versions, ...). Every field but ``hash_key`` has a default; fields are keyword-only.

    Attributes
    ----------
    log_texts : bool
        Add the raw texts (``texts``) to the sample and riskiest-record tables (default: ids and keyed
        hashes only).
    log_samples : bool
        Log per-sample scores, flags and token counts (default False: anyone who can load the target
        could recompute a candidate's score and find its label there).
    log_metrics : bool
        Log ``result.metrics``; False when ``mlflow.models.evaluate`` logs the returned metrics itself.
    prefix : str
        Prepended to metric, param and artifact names (``metric_prefix``).
    tag_headline : bool
        Write the headline tags on ``model_version`` (a failing gate verdict is written regardless).
    clear_gate_fail : bool
        Let a passing gate at least as strong as the failed audit replace ``mia.gate=fail`` on the version.
    hash_key : HashKey
        Key of the logged hashes (never logged); required: the options parser resolves it once per audit
        (``hash_key_file``, else ``$MLFLOW_MIA_HASH_KEY``, else a random key that is not kept, which
        the log warns about; :func:`~mlflow_mia.hashing.resolve_hash_key`).
    group_column : str, optional
        Membership audit: the group column's name, for the report's user-level section.
    texts : sequence of str, optional
        Membership audit: the pool texts in pool order; required with ``log_texts``.
    population : PopulationSet, optional
        Membership audit: for the population digest param and the run's datasets.
    gate : GateResult or CanaryGateResult, optional
        The release gate's verdict: tags the run ``mia.gate`` and goes into the report.
    model_version : (name, version), iterable of them, or ModelVersion, optional
        The target's registry version(s), tagged with the verdict.
    weights_id : str, optional
        The audited weights' digest (``mia.weights_sha256``); a fail is recorded against it.
    params : dict, optional
        Extra params (e.g. the requested model URIs).
    run_name : str, optional
        New name of the run (also renames the run ``mlflow run`` created).
    sources : dict, optional
        Membership audit: ``{"pool": ..., "population": ...}``, the sources of the run's datasets.
    planted_in : str, optional
        Canary audit: where the canary set was planted (kept in the gate record).
    canaries : CanarySet, optional
        Canary audit: the audited set (its digest, counts and figures are logged; its texts only with
        ``log_texts``); required by :func:`~mlflow_mia.tracking.canary_log.log_canary_audit`.
    """

    log_texts: bool = False
    log_samples: bool = False
    log_metrics: bool = True
    prefix: str = ""
    tag_headline: bool = True
    clear_gate_fail: bool = False
    hash_key: Any
    group_column: str | None = None
    texts: Any = None
    population: Any = None
    gate: Any = None
    model_version: Any = None
    weights_id: str | None = None
    params: dict | None = None
    run_name: str | None = None
    sources: dict | None = None
    planted_in: str | None = None
    canaries: Any = None

    @classmethod
    def from_options(cls, options, **context) -> "LogSettings":
        """The options' logging choices (``log_texts``, ``log_samples``, ``metric_prefix``,
        ``hash_key``, and ``tag_model_version``, ``clear_gate_fail``, ``group_column``, ``planted_in``
        where the audit has them), then ``context`` (fields of this class).

        Raises
        ------
        TypeError
            A ``context`` key that is not a field.

        Examples
        --------
        >>> from types import SimpleNamespace
        >>> from mlflow_mia.hashing import HashKey
        >>> opts = SimpleNamespace(log_texts=False, log_samples=True, metric_prefix="v1_", tag_model_version=False,
        ...                        clear_gate_fail=False, hash_key=HashKey.random())
        >>> s = LogSettings.from_options(opts, log_metrics=False)
        >>> (s.log_samples, s.prefix, s.tag_headline, s.log_metrics)
        (True, 'v1_', False, False)
        """
        base = cls(log_texts=options.log_texts, log_samples=options.log_samples, prefix=options.metric_prefix,
                   tag_headline=getattr(options, "tag_model_version", True),
                   clear_gate_fail=getattr(options, "clear_gate_fail", False),
                   hash_key=options.hash_key, group_column=getattr(options, "group_column", None),
                   planted_in=getattr(options, "planted_in", None))
        unknown = sorted(set(context) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"LogSettings has no field(s) {unknown}")
        return replace(base, **context)
