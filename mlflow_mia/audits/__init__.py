"""The audits, siblings of one shape: inputs -> signals -> scores -> result -> report.

- :mod:`.membership`: membership inference against a masked or causal LM (Mireshghallah et al.
  2022; Mattern et al. 2023): :func:`~.membership.run_audit`;
- :mod:`.ner`: prompt-based memorization detection in NER models (Xia et al. 2025):
  :func:`~.ner.run.ner_audit`;
- :mod:`.canary`: exposure and the one-run epsilon bound of planted canaries: :func:`~.canary.run.canary_audit`.

Each kind's folder holds the same files: ``kind.py`` (its :class:`~.base.Audit`), ``inputs.py``
(tables -> what stage 1 reads), ``signals.py`` (stage 1, the only part that runs models), stage 2
(``scoring.py``), ``run.py`` (the two stages in a row) and its report. Each model's signals of the membership audit
are jobs of an engine (:mod:`mlflow_mia.engines`), which knows no audit.

No MLflow code here: :mod:`mlflow_mia.tracking` logs what they return.
"""
