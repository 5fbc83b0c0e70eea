"""MLflow tracking: what an audit writes to runs and to the model registry. It only logs: running an
audit and handing its result here is :mod:`mlflow_mia.pipeline`.

- :mod:`.audit_log`: :func:`~.audit_log.log_audit` (params, metrics, figures, tables,
  report, tags of one membership audit); :mod:`.ner_log` and :mod:`.canary_log`: the same for the
  NER and canary audits; :mod:`.verdict`: the verdict of a run;
  :mod:`.artifacts`: what both write with (artifacts, metric names, keyed tables);
- :mod:`.registry_tags`: the registry version's headline and gate tags (a fail follows
  the weights and is never washed);
- :mod:`.runs`: the tracking URI, the experiment, starting or resuming a run.
"""
