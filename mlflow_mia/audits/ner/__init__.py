"""The NER prompt memorization audit (Xia et al. 2025): inputs -> confidences -> M-MEM -> report.

- :mod:`.names`: BIO-tagged corpora -> the detection set (in-sample vs out-of-sample
  entity names, balanced per type, dev/test split);
- :mod:`.prompts`: the prompt templates (shipped in :mod:`.prompt_sets`), loaded and validated;
- :mod:`.audit`: :func:`~.audit.ner_audit`, prompts x names -> entity confidences
  (:mod:`mlflow_mia.signals.entity_confidence`) -> M-MEM per prompt and type;
- :mod:`.report`: the Markdown report.
"""
