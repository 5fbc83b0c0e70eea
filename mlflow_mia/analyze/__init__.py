"""``mlflow-mia analyze``: why the demo target leaks and what lowers it, as logged runs.

- :mod:`~mlflow_mia.analyze.plan`: suite sizes, target variants, audits;
- :mod:`~mlflow_mia.analyze.variants`: training, registering and finding the variants
  (shorter training, a larger model, inserted names, DP-SGD);
- :mod:`~mlflow_mia.analyze.findings`: the papers' findings, their figures and the rule
  that decides them (reproduced / not reproduced / not resolved);
- :mod:`~mlflow_mia.analyze.paired`: seed summaries and paired differences with intervals;
- :mod:`~mlflow_mia.analyze.suite`: :func:`run_analysis`, resumable;
- :mod:`~mlflow_mia.analyze.output`: the findings tables read from finished runs, and the
  parent run's tables, plots and summary.
"""

from mlflow_mia.analyze.findings import FINDINGS
from mlflow_mia.analyze.output import differences_table, findings_table
from mlflow_mia.analyze.plan import ANALYSIS_SIZES
from mlflow_mia.analyze.suite import AnalysisResult, run_analysis, select_findings
from mlflow_mia.analyze.variants import insert_names, names_frames, names_pool

__all__ = ["ANALYSIS_SIZES", "AnalysisResult", "FINDINGS", "differences_table", "findings_table", "insert_names",
           "names_frames", "names_pool", "run_analysis", "select_findings"]
