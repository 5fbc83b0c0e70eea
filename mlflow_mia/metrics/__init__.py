"""Pure numpy metrics of membership inference attacks.

Label 1 = member, 0 = non-member; a higher score means "more likely a member".
Every metric takes ``(y_true, y_score, *, ...)`` with keyword-only options.
"""

from .aggregate import GroupScores, group_scores, length_breakdown, riskiest_records
from .bootstrap import (
    BootstrapDistribution,
    bootstrap_ci,
    bootstrap_distribution,
    precision_at_threshold_statistic,
    recall_at_threshold_statistic,
    tpr_at_fpr_statistic,
)
from .epsilon import (
    EpsilonLowerBound,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    epsilon_lower_bound_from_counts,
    max_certifiable_epsilon,
)
from .group_privacy import GroupPrivacy, group_privacy
from .paired import PairedComparison, claim_verdict, paired_bootstrap
from .roc import RocResult, auc_statistic, roc, tpr_at_fpr, tpr_at_fpr_from_roc
from .thresholds import (
    ThresholdMetrics,
    metrics_at_threshold,
    mean_member_loss_threshold,
    min_population_size,
    population_threshold,
    population_threshold_metrics,
    unresolved_reason,
)

__all__ = [
    "RocResult",
    "roc",
    "tpr_at_fpr",
    "tpr_at_fpr_from_roc",
    "ThresholdMetrics",
    "min_population_size",
    "population_threshold",
    "metrics_at_threshold",
    "population_threshold_metrics",
    "unresolved_reason",
    "mean_member_loss_threshold",
    "bootstrap_ci",
    "bootstrap_distribution",
    "BootstrapDistribution",
    "precision_at_threshold_statistic",
    "recall_at_threshold_statistic",
    "auc_statistic",
    "tpr_at_fpr_statistic",
    "GroupScores",
    "group_scores",
    "length_breakdown",
    "riskiest_records",
    "EpsilonLowerBound",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "epsilon_lower_bound_from_counts",
    "GroupPrivacy",
    "group_privacy",
    "max_certifiable_epsilon",
    "PairedComparison",
    "paired_bootstrap",
    "claim_verdict",
]
