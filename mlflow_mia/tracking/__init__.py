"""MLflow tracking: what an audit writes to runs and to the model registry.

- :mod:`.audit_run`: :func:`~.audit_run.audit_and_log`, one membership audit run on its
  engine, gated and logged (the core of the evaluator, the CLI, ``compare``, ``analyze``);
- :mod:`.audit_log`: :func:`~.audit_log.log_audit` (params, metrics, figures, tables,
  report, tags of one membership audit); :mod:`.ner_log`: the same for the NER audit;
  :mod:`.artifacts`: what both write with (artifacts, metric names, keyed tables);
- :mod:`.registry_tags`: the registry version's headline and gate tags (a fail follows
  the weights and is never washed);
- :mod:`.runs`: the tracking URI, the experiment, starting or resuming a run.
"""
