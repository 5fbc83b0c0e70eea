"""The audits, siblings of one shape: inputs -> signals -> scores -> result -> report.

- :mod:`.membership`: membership inference against a masked LM (Mireshghallah et al.
  2022; Mattern et al. 2023): :func:`~.membership.run_audit`;
- :mod:`.ner`: prompt-based memorization detection in NER models (Xia et al. 2025):
  :func:`~.ner.audit.ner_audit`.

No MLflow code here: :mod:`mlflow_mia.tracking` logs what they return.
"""
