"""Parse the flat ``evaluator_config["mia"]`` dict once, at the boundary.

The same flat keys drive the ``mia`` evaluator plugin, the ``mlflow-mia`` CLI
and the MLproject entry points: each front end turns its input into this dict,
and :func:`parse_options` turns the dict into an :class:`~mlflow_mia.config.AuditConfig`
(what the audit computes) and :class:`MiaOptions` (where the data comes from and
what gets logged). Every key is declared once, on the field that holds it
(:mod:`mlflow_mia.options.schema`); unknown keys are an error that lists the valid ones.

The release gate (:class:`Gate`) lives here too: a budget on the TPR at a fixed
FPR, checked against the metrics of a finished audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from mlflow_mia.attack_settings import ATTACK_SETTINGS
from mlflow_mia.attacks import ATTACKS
from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.metrics.gate import Gate, GateResult  # re-exported: the gate lives in .gate
from mlflow_mia.options.schema import CommonOptions, build, options_for, parse_values, register_family
from mlflow_mia.options.values import mia_section
from mlflow_mia.option import option
from mlflow_mia.attacks import check_attack_names, gate_attacks
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.metrics.gate import check_gate_confidence
import os

__all__ = ["MiaOptions", "parse_options"]

#: How an audit uses several reference models (``reference_mode``).
REFERENCE_MODES = ("set", "each")

_MODEL_FORMS = "models:/name/version, models:/name@alias, runs:/<run_id>/<path> or a local folder"


def _record_path(value) -> str:
    """A shadow record path that exists (the record is read when the audit runs)."""
    path = os.fspath(value).strip() if isinstance(value, (str, os.PathLike)) else value
    if not isinstance(path, str) or not os.path.isfile(path):
        raise ValueError(f"shadow_record {value!r} is not a file: give the JSON record written by mlflow-mia "
                         "train-shadows (--record PATH)")
    return path


@dataclass(frozen=True)
class MiaOptions(CommonOptions):
    """Everything in ``evaluator_config["mia"]`` that is not part of :class:`AuditConfig`.

    Each field is an option (its help is its documentation; see :data:`CONFIG_KEYS`),
    plus those of :class:`~mlflow_mia.options.schema.CommonOptions`.
    """

    reference_model: Any = option(None, f"reference model(s): {_MODEL_FORMS}, comma-separated (or a list) for "
                                  "several. Needed by likelihood_ratio, lira_offline and rmia: models trained on "
                                  "similar data, disjoint from the target's training data. Several make a reference "
                                  "set, used as reference_mode says. The canary audit takes one, that never saw a "
                                  "canary: its score becomes the likelihood ratio instead of the target's signal "
                                  "alone", flags=("--reference",), metavar="URI[,URI]",
                                  short="reference model URI(s), comma-separated: models trained on similar data, "
                                        "disjoint from the target's (likelihood_ratio, lira_offline, rmia)",
                                  default_doc="the membership demo's oracle reference models:/bbc-reference@champion, "
                                              "else none")
    reference_mode: str | None = option(None, "how several references are used: set = one audit over the set "
                                        "(lira_offline and rmia use every reference; likelihood_ratio is reported "
                                        "against each: likelihood_ratio against the first, "
                                        "likelihood_ratio.reference_2 ... against the others, named in the params "
                                        "reference_model, reference_2_model, ...); each = one audit per reference "
                                        "(one run each; with compare, every version against each). One reference: "
                                        "both are the same audit", choices=REFERENCE_MODES,
                                        short="several references: set = one audit over the set; each = one audit "
                                              "(one run) per reference",
                                  default_doc="set for audit and the evaluator; each for compare")
    shadow_record: str | None = option(None, "the shadow models' training record (JSON written by mlflow-mia "
                                       "train-shadows): which reference models trained on which texts, under your "
                                       "hash key (hash_key_file or MLFLOW_MIA_HASH_KEY, the key they were trained "
                                       "with). Give the shadows as the references, in the record's order: stage 1 "
                                       "then reads the shadow membership, lira_online runs (online LiRA, Carlini "
                                       "et al. 2022; 4+ shadows) and joins a gate's attacks, and lira_offline and "
                                       "rmia use each text's OUT shadows", metavar="PATH", parse=_record_path,
                                       short="the shadows' training record (JSON from mlflow-mia train-shadows), "
                                             "the shadows given as --reference in its order: lira_online runs",
                                       default_doc="none; the demo's with --demo-shadows")
    population_data: Any = option(None, "population set: texts from the same distribution as the members, "
                                  "disjoint from the pool, only used to set thresholds; a DataFrame or a "
                                  ".csv/.jsonl/.json/.parquet path", flags=("--population",), metavar="PATH",
                                  default_doc="required; the demo's without --data")
    text_column: str = option("text", "text column of the pool", metavar="NAME")
    id_column: str | None = option(None, "sample id column written to the per-sample table", metavar="NAME",
                                   default_doc="row number")
    group_column: str | None = option(None, "user id column (one id per user: a patient, an author, an article); "
                                      "adds user-level metrics user/<attack>/...", metavar="NAME",
                                      default_doc="the demo's article_id, else none")
    population_text_column: str | None = option(None, "text column of the population set", metavar="NAME",
                                                default_doc="text_column")
    population_group_column: str | None = option(None, "user id column of the population set; needed for "
                                                 "user-level thresholds; when given, the population set must have "
                                                 "it", metavar="NAME",
                                                 default_doc="group_column, where the population set has it")
    gate: Gate | None = option(None, "release gate, budget(s) ALPHA:MAX with MAX above ALPHA (a string, a list or "
                               "a dict {alpha: max}; repeatable on the command line): pass when every attack's "
                               "one-sided upper confidence bound of the TPR at FPR ALPHA, at sample and user level, "
                               "is at most MAX; fail when some one-sided lower confidence bound exceeds MAX; otherwise "
                               "inconclusive (the audit shows neither). Tags mia.gate=pass|fail|inconclusive; the "
                               "command exits with 3 unless it passes. Each ALPHA is added to fprs. A gated audit always "
                               "runs every attack its references allow (mlflow_mia.attacks.gate_attacks; "
                               "docs/results/attacks.md); attacks named with attacks are added to them. Needs confidence "
                               ">= 0.95 and MAX < 1",
                               key="max_tpr_at_fpr", parse=Gate.parse, repeat=True, metavar="ALPHA:MAX",
                               short="release gate: pass when every attack's upper bound of the TPR at FPR ALPHA is "
                                     "at most MAX, fail when a lower bound exceeds it, else inconclusive (exit 3 "
                                     "unless it passes); repeatable")
    allow_loose_budget: bool = option(False, "accept a release budget that states almost nothing: a "
                                      "max_tpr_at_fpr budget above 0.5 (it passes a model whose attacks find every "
                                      "other member), or a canary max_exposure above the bits of the canary set's "
                                      "largest candidate space (no exposure can exceed it). Such a budget is refused "
                                      "without it; with it, the verdict reason, the report and the gate record "
                                      "(loose) say which budgets were loose",
                                      short="accept a budget that states almost nothing (a TPR budget above 0.5, a "
                                            "canary exposure budget above its largest space)")
    tag_model_version: bool = option(True, "tag the audited registry version with mia.* headline numbers (mia.canary.* "
                                     "for the canary audit; a failing gate verdict is written regardless)",
                                     flags=("--no-tag-model-version",), invert=True, mlproject=False,
                                     flag_help="do not tag the audited registry version with mia.* (mia.canary.*) "
                                               "headline numbers (a failing gate verdict is still written)")
    clear_gate_fail: bool = option(False, "let a passing gate replace an earlier mia.gate=fail on the registry "
                                   "version (or, for the membership audit, on another version with the same weights) "
                                   "when this audit is at least as strong (else a fail stays). Membership audit: the "
                                   "same or more attacks, a budget at each failed FPR as tight, the same confidence "
                                   "and a pool as large. Canary audit: the same canary set (keyed digest, under the "
                                   "same hash key) and planting, the same gated metrics with budgets as tight, the "
                                   "same score, confidence as high, delta as small, as many candidates",
                                   mlproject=False, short="let a passing gate replace an earlier mia.gate=fail tag "
                                                          "when this audit is at least as strong")
    trust_remote_code: bool = option(False, "let a model the audit loads itself (target_model, reference_model, "
                                     "neighbour_generator) run the Python code shipped with it or load pickle "
                                     "weights (else such a model is refused; see docs/explanations/security.md). It cannot "
                                     "protect model=: MLflow has loaded that model before the evaluator runs; use "
                                     "model=None with target_model", mlproject=False,
                                     short="let a model the audit loads run its own Python code or load pickle "
                                           "weights (docs/explanations/security.md)")
    engine: str = option("local", "where the signals are computed: local, or spark (on Apache Spark, scored on "
                         "the driver; pip install 'mlflow-mia[spark]')", choices=("local", "spark"))
    spark_master: str | None = option(None, "Spark master of the spark engine, e.g. local[2]", metavar="URL",
                                      default_doc="the active session, else Spark's default")
    spark_store: str | None = option(None, "Parquet signal store of the spark engine (any path Spark writes); a "
                                     "re-run computes only the texts missing there", metavar="PATH")

    #: The reference models given, as a tuple: URIs split at commas (a list or one object kept); set at
    #: construction from ``reference_model``.
    references: tuple = field(init=False, repr=False, compare=False)
    #: The reference sets to audit, one audit each: ``((all references),)`` (mode ``set``, the default),
    #: ``((r,) for each r)`` (mode ``each``), ``((),)`` without references; set at construction.
    reference_sets: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        """Refuse a loose gate budget without ``allow_loose_budget``
        (:meth:`~mlflow_mia.metrics.gate.Gate.check_loose`); derive :attr:`references` and
        :attr:`reference_sets` once, when the options are built.

        >>> MiaOptions(reference_model="models:/a@x, models:/b/2").references
        ('models:/a@x', 'models:/b/2')
        >>> MiaOptions(reference_model="a,b").reference_sets
        (('a', 'b'),)
        >>> MiaOptions(reference_model="a,b", reference_mode="each").reference_sets
        (('a',), ('b',))
        >>> MiaOptions().reference_sets
        ((),)
        """
        if self.gate is not None:  # a budget above 0.5 (0.01:0.9999) states nothing: only when stated
            self.gate.check_loose(allowed=self.allow_loose_budget)
        refs = reference_uris(self.reference_model)
        object.__setattr__(self, "references", refs)
        sets = (refs,) if self.reference_mode in (None, "set") or not refs else tuple((r,) for r in refs)
        object.__setattr__(self, "reference_sets", sets)


def reference_uris(value) -> tuple:
    """The reference models in ``value``: URIs split at commas, a list's items, or one object; ``()`` for none.

    >>> reference_uris(" models:/a@x, models:/b/2 ")
    ('models:/a@x', 'models:/b/2')
    >>> reference_uris(None)
    ()
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if isinstance(value, str):
        return tuple(uri.strip() for uri in value.split(",") if uri.strip())
    if isinstance(value, (list, tuple)):
        return tuple(v.strip() if isinstance(v, str) else v for v in value if not (isinstance(v, str) and not v.strip()))
    return (value,)


def parse_options(config: Mapping[str, Any] | None, *, targets: str | None = None
                  ) -> tuple[AuditConfig, MiaOptions]:
    """Parse a flat ``evaluator_config["mia"]`` dict into ``(AuditConfig, MiaOptions)``.

    Every value is read and checked by its declaration (:mod:`mlflow_mia.options.schema`)
    before anything is computed; the hash key is resolved here, once per audit
    (``hash_key_file``, else ``$MLFLOW_MIA_HASH_KEY``, else a random key).

    Parameters
    ----------
    config : mapping or None
        Flat keys, see :data:`CONFIG_KEYS`. A nested ``{"mia": {...}}`` is unwrapped.
    targets : str, optional
        Name of the label column given to ``mlflow.models.evaluate(targets=...)``;
        the default of ``label_column``.

    Returns
    -------
    (AuditConfig, MiaOptions)

    Raises
    ------
    ValueError
        Unknown keys (the message lists the valid ones) or invalid values (the message
        names the key and the expected form); a gate budget above 0.5 TPR without
        ``allow_loose_budget`` (:meth:`~mlflow_mia.metrics.gate.Gate.check_loose`).
    FileNotFoundError
        ``hash_key_file`` does not exist.
    """
    values = parse_values("mia", mia_section(config))
    if values.get("method", "mia") != "mia":
        raise ValueError(f"method {values['method']!r} is not read by parse_options (it reads method 'mia'); "
                         "use mlflow_mia.audits.ner.kind.parse_ner_config")
    gate = values.get("max_tpr_at_fpr")
    if "attacks" in values:
        values["attacks"] = check_attack_names(values["attacks"])
    n_refs = len(reference_uris(values.get("reference_model")))
    shadows = values.get("shadow_record") is not None  # the references' training halves are known
    # The attacks the shadow membership enables (lira_online with 4+ shadows: 2 IN, 2 OUT per text).
    online = tuple(a for a in gate_attacks(n_refs, shadow_membership=shadows)
                   if "shadow_membership" in ATTACKS[a].requires)
    if gate is not None:
        # A gate always runs every attack the references allow (docs/results/attacks.md); named attacks add to that set.
        values["attacks"] = tuple(dict.fromkeys(gate_attacks(n_refs, shadow_membership=shadows)
                                                + tuple(values.get("attacks", ()))))
        check_gate_confidence(values.get("confidence", MetricConfig.confidence), option="confidence")
        # every gate alpha is reported
        values["fprs"] = tuple(sorted(set(values.get("fprs", MetricConfig.fprs)) | set(gate.alphas), reverse=True))
    elif online:  # a shadow record is given to run online LiRA: it joins the attacks named (or the default ones)
        values["attacks"] = tuple(dict.fromkeys(values.get("attacks", AuditConfig.attacks) + online))
    audit_config = build(AuditConfig, values, signal=build(SignalConfig, values),
                         metrics=build(MetricConfig, values), neighbourhood=build(NeighbourhoodConfig, values),
                         attack_settings={name: build(cls, values) for name, cls in ATTACK_SETTINGS.items()})
    text_column = values.get("text_column", MiaOptions.text_column)
    options = build(MiaOptions, values, label_column=values.get("label_column") or targets,
                    population_text_column=values.get("population_text_column") or text_column,
                    hash_key=values.get("hash_key_file") or resolve_hash_key())
    return audit_config, options


def _mia_classes() -> tuple:
    """The membership audit's config classes, with the ``Settings`` of every attack registered so far: each
    attack declares its options (``min_k_fraction``, ``rmia_gamma``, ...) there, and ``AuditConfig.attack_settings``
    holds their values (:mod:`mlflow_mia.attack_settings`). Read each time, so an attack registered later counts."""
    return (AuditConfig, SignalConfig, NeighbourhoodConfig, MetricConfig, *dict.fromkeys(ATTACK_SETTINGS.values()),
            MiaOptions)


register_family("mia", _mia_classes, frozenset({"audit", "compare", "mia"}))

#: The ``evaluator_config["mia"]`` keys of the membership audit and their help, derived from the declarations.
CONFIG_KEYS = {key: e.field.option.help for key, e in options_for("mia").items()}
