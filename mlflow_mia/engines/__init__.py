"""Engines: where each model's signals are computed, one per-model job at a time, for any audit.

An engine knows no audit: it loads a model by role and runs the per-model signal job
(one model, a list of texts, a :class:`~mlflow_mia.config.SignalConfig` ->
:class:`~mlflow_mia.signals.SignalResult`, row-aligned). An audit's stage 1 (e.g.
:func:`mlflow_mia.audits.membership.signals.stage_one`) asks it for the signals of each
model it needs and computes the rest itself:

- :mod:`.local`: ``"local"``, every job in this process (:class:`~.local.LocalEngine`);
- :mod:`.spark`: ``"spark"``, each job on Apache Spark executors (:class:`~.spark.SparkEngine`;
  :mod:`.spark_executors` runs there, :mod:`.spark_store` keeps the signed Parquet store,
  :mod:`.spark_errors` brings an executor's error back to the driver);
- :mod:`.registry`: the engines by name (:func:`~.registry.get_engine`) and what an engine is.
"""
