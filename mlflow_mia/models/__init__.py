"""Where models come from: registry URIs, run URIs, folders and pyfunc models, resolved safely.

- :mod:`.resolve`: :func:`~.resolve.resolve_model` turns ``models:/name/version``,
  ``models:/name@alias``, ``runs:/<run_id>/<path>``, a saved MLflow model or a Hugging
  Face folder into a :class:`~mlflow_mia.signals.MaskedLM` (or a token classifier) with
  its identity: the weights digest computed from the files it loads, the registry
  version pinned, and a registry identity accepted only when the registered weights
  digest to the same value;
- :mod:`.files`: model files are read only from inside the artifact (no absolute or
  ``..`` paths, no symbolic links leaving it, no pickle weights unless trusted);
- :mod:`.ner`: the same for token-classification models (the NER audit).

This layer sits below the engines: Spark executors resolve models by URI with it.
"""
