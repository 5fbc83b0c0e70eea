"""Membership inference metrics as a Hugging Face ``evaluate`` module.

Load it offline from its folder (``mlflow_mia.entrypoints.hf_metric.METRIC_PATH``) or from
this file with ``evaluate.load(path)``. Every number comes from
:func:`mlflow_mia.audits.membership.scoring.attack_report`, the function that reports each
attack of an audit (on :mod:`mlflow_mia.metrics`), and carries the name an audit
logs for one attack (without the ``{attack}/`` prefix), so a score computed here
equals the audit's.
"""

import math
import numbers

import datasets
import evaluate

import numpy as np

from mlflow_mia.audits.membership.scoring import attack_report
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.metrics.thresholds import population_threshold
from mlflow_mia.option import coerce, declared_options

_DESCRIPTION = """\
Scores a membership inference attack on a language model the way an mlflow-mia audit does. The
inputs are the attack's scores on a target pool (higher = more likely a training member) and the
pool's membership labels (1 = member, 0 = non-member), plus the scores of a population set: texts
from the same distribution, disjoint from the pool, used only to set thresholds. It reports the
exact ROC AUC; the TPR at each false-positive rate read off the ROC; at the population
thresholds (the 1 - alpha quantile of the population scores, member iff score > threshold) the
precision, recall and FPR achieved on the pool; and the empirical epsilon lower bound that the
attack proves against any (eps, delta)-differentially private training (one-sided
Clopper-Pearson bounds on the error rates, Jagielski et al. 2020).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): attack scores of the target pool, higher = more likely a
        member. Finite values only: NaN and infinity are refused by position; any finite
        float64 (up to +-1.8e308) is accepted.
    references (`list` of `int`): membership labels of the pool, 1 = member, 0 = non-member.
    population_scores (`list` of `float`): attack scores of the population set (required); at
        least ceil(1 / min(fprs)) values.
    fprs (`list` of `float`, default [0.1, 0.01, 0.001]): target false-positive rates alpha (a
        comma-separated string such as "0.1,0.01" is read as a list).
    delta (`float`, default 1e-5): delta of the (eps, delta)-DP guarantee tested against.
    confidence (`float`, default 0.95): confidence of the epsilon lower bound and of the
        bootstrap intervals.
    bootstrap_rounds (`int`, default 0): bootstrap resamples of the pool for intervals on the
        AUC and the TPRs (0 = none).
    seed (`int`, default 0): seed of the bootstrap.
    Each setting is read and checked as the audit's option of the same name; a bad value, a label
    other than 0/1 (0.5 is refused, not truncated) or a score that is not a number raises a
    `ValueError` that names it, before anything is stored.
Returns:
    `dict` of `float`, keyed as an audit's metrics of one attack: `auc`, `tpr_at_fpr_<alpha>`,
    `precision_at_pop_fpr_<alpha>`, `recall_at_pop_fpr_<alpha>`, `achieved_fpr_at_pop_fpr_<alpha>`,
    `threshold_at_pop_fpr_<alpha>`, `epsilon_lower_bound`, `epsilon_lower_bound_point` (inf
    when a threshold makes no error of one kind), and with bootstrap rounds `auc_ci_low`,
    `auc_ci_high`, `tpr_at_fpr_<alpha>_ci_low`, `tpr_at_fpr_<alpha>_ci_high`.
Examples:
    >>> import evaluate
    >>> from mlflow_mia.entrypoints.hf_metric import METRIC_PATH
    >>> mia = evaluate.load(METRIC_PATH)
    >>> out = mia.compute(predictions=[3.0, 2.5, 0.2, 0.1], references=[1, 1, 0, 0],
    ...                   population_scores=[0.1 * i for i in range(20)], fprs=[0.1])
    >>> out["auc"], out["recall_at_pop_fpr_0.1"], out["precision_at_pop_fpr_0.1"]
    (1.0, 1.0, 1.0)
"""

_CITATION = """\
@inproceedings{mireshghallah2022quantifying,
  title = {Quantifying Privacy Risks of Masked Language Models Using Membership Inference Attacks},
  author = {Mireshghallah, Fatemehsadat and Goyal, Kartik and Uniyal, Archit and
            Berg-Kirkpatrick, Taylor and Shokri, Reza},
  booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing},
  year = {2022}
}
@inproceedings{mattern2023membership,
  title = {Membership Inference Attacks against Language Models via Neighbourhood Comparison},
  author = {Mattern, Justus and Mireshghallah, Fatemehsadat and Jin, Zhijing and
            Sch{\\"o}lkopf, Bernhard and Sachan, Mrinmaya and Berg-Kirkpatrick, Taylor},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2023},
  year = {2023}
}
@article{xia2025exploring,
  title = {Exploring prompts to elicit memorization in masked language model-based named entity
           recognition},
  author = {Xia, Yuxi and Sedova, Anastasiia and Luz de Araujo, Pedro Henrique and Kougia, Vasiliki
            and Nu{\\ss}baumer, Lisa and Roth, Benjamin},
  journal = {PLOS ONE},
  volume = {20},
  number = {9},
  pages = {e0330877},
  year = {2025}
}
@inproceedings{jagielski2020auditing,
  title = {Auditing Differentially Private Machine Learning: How Private is Private {SGD}?},
  author = {Jagielski, Matthew and Ullman, Jonathan and Oprea, Alina},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2020}
}
"""

_REFERENCE_URLS = [
    "https://arxiv.org/abs/2203.03929",
    "https://arxiv.org/abs/2305.18462",
    "https://doi.org/10.1371/journal.pone.0330877",
    "https://arxiv.org/abs/2006.07709",
]


#: The audit's declarations of the settings this metric takes: their checks and defaults (bootstrap_rounds aside:
#: 0 here, so a plain compute stays fast).
_SETTINGS = {**{k: declared_options(MetricConfig)[k] for k in ("fprs", "delta", "confidence", "bootstrap_rounds")},
             "seed": declared_options(SignalConfig)["seed"]}


def _settings(kwargs: dict) -> dict:
    """``kwargs`` with each audit setting read by its declaration (``"0.1"`` -> ``(0.1,)``; ``seed='x'`` refused)."""
    return {k: coerce(_SETTINGS[k], v) if k in _SETTINGS and v is not None else v for k, v in kwargs.items()}


def _check_numbers(values, what: str) -> None:
    """Refuse a value that is not a real number, or is NaN or infinite (a finite 1e308 is a number like any other)."""
    for i, v in enumerate([] if values is None else values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise ValueError(f"{what} must be numbers, got {v!r} at position {i}")
        if not math.isfinite(v):
            kind = "NaN" if math.isnan(v) else "infinite"
            raise ValueError(f"{what} must be finite numbers, got {v!r} ({kind}) at position {i}")


def _check_inputs(predictions, references) -> None:
    """Refuse what the int32 / float64 features would truncate or fail on: labels other than 0/1, non-numbers."""
    _check_numbers(predictions, "predictions (attack scores)")
    for i, r in enumerate([] if references is None else references):
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Real) or r not in (0, 1):
            raise ValueError(f"references must be membership labels 0 or 1 (1 = member), got {r!r} at position {i}")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MembershipInference(evaluate.Metric):
    """AUC, TPR at FPR, population-threshold precision/recall and epsilon lower bound of an attack."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # float64: the scores reach the metrics unrounded (Value("float") is float32).
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("int32")}),
            reference_urls=_REFERENCE_URLS,
            license="Apache-2.0",
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Score the attack; settings and inputs are checked before ``evaluate`` stores anything (see ``_compute``)."""
        kwargs = _settings(kwargs)
        _check_numbers(kwargs.get("population_scores"), "population_scores")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of scores and labels, checked first (labels 0/1, scores numbers)."""
        _check_inputs(predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one score and label, checked first (label 0/1, score a number)."""
        _check_inputs(None if prediction is None else [prediction], None if reference is None else [reference])
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions, references, population_scores=None, fprs=_SETTINGS["fprs"].default,
                 delta=_SETTINGS["delta"].default, confidence=_SETTINGS["confidence"].default, bootstrap_rounds=0,
                 seed=_SETTINGS["seed"].default):
        if population_scores is None:
            raise ValueError("population_scores is required: the attack's scores of a population set (same "
                             "distribution as the members, disjoint from the pool), used to set thresholds")
        # Validated and ordered (descending FPRs) as the audit's own settings are; the numbers come from the
        # function that reports each attack of an audit, under the same names.
        mc = MetricConfig(fprs=tuple(fprs), delta=delta, confidence=confidence, bootstrap_rounds=bootstrap_rounds,
                          seed=seed)
        population_scores = np.asarray(population_scores, dtype=np.float64)
        population_threshold(population_scores, alpha=min(mc.fprs))  # too few: the library's error, named
        report = attack_report("attack", np.asarray(references), np.asarray(predictions, dtype=np.float64),
                               population_scores, AuditConfig(metrics=mc))
        out = report.metrics("")
        return {k: float(v) for k, v in out.items()}
