"""Every user option, declared once, and what is derived from the declarations.

- :mod:`mlflow_mia.option` (core): :func:`~mlflow_mia.option.option`, the field
  declaration (help, flat key, range, which commands use it) on the config dataclasses;
- :mod:`.schema`: options shared by the audits (:class:`~.schema.CommonOptions`) and the
  command-only ones; argparse flags, evaluator-config keys and their errors, the key
  tables of the docs and the MLproject parameters, all derived;
- :mod:`.audit`: :class:`~.audit.MiaOptions` and :func:`~.audit.parse_options` (the
  membership audit's flat ``evaluator_config["mia"]`` keys, parsed once);
- :mod:`.ner`: :class:`~.ner.NerOptions` (the NER audit's prompt tables);
- :mod:`.values`: what every front end shares (an unset MLproject parameter, the
  ``{"mia": {...}}`` wrapper).
"""
