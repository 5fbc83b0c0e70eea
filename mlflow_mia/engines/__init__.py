"""Engines: where stage 1 of an audit runs, producing :class:`~.audit_signals.AuditSignals`.

:func:`mlflow_mia.audits.membership.run_audit` has one setup path (the same checks and
errors, in the same order) whatever the engine; an engine loads the models and
computes the signals of the model roles the attacks need:

- :mod:`.audit_signals`: :class:`~.audit_signals.AuditSignals` (the signals by attack
  input, pool rows then population rows) and :class:`~.audit_signals.AuditExtras`
  (what the report tables read: token ids, neighbour examples, generator evidence);
- :mod:`.local`: ``"local"``, every model in this process (:func:`~.local.stage_one`);
- :mod:`.spark`: ``"spark"``, each model's signals on Apache Spark executors
  (:mod:`.spark_executors` runs there, :mod:`.spark_store` keeps the signed Parquet store,
  :mod:`.spark_errors` brings an executor's error back to the driver);
- :mod:`.registry`: the engines by name (:func:`~.registry.get_engine`).
"""
