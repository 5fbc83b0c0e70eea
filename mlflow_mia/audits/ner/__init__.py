"""The NER prompt memorization audit (Xia et al. 2025): inputs -> confidences -> M-MEM -> report.

- :mod:`.names`: BIO-tagged corpora -> the detection set (in-sample vs out-of-sample
  entity names, balanced per type, dev/test split);
- :mod:`.prompts`: the prompt templates (shipped in :mod:`.prompt_sets`), loaded and validated;
- :mod:`.signals`: stage 1, :func:`~.signals.ner_signals`, prompts x names -> entity confidences
  (:mod:`mlflow_mia.signals.entity_confidence`; the only part that runs the taggers);
- :mod:`.scoring`: stage 2, :func:`~.scoring.score_ner`, confidences -> M-MEM per prompt and type (pure);
- :mod:`.run`: :func:`~.run.ner_audit`, the two stages in a row;
- :mod:`.kind`: the audit's parts as one :class:`~mlflow_mia.audits.base.Audit`;
- :mod:`.inputs`: the names table, checked before a model loads;
- :mod:`.report`: the Markdown report.
"""
