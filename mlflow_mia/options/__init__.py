"""Every user option, declared once, and what is derived from the declarations.

- :mod:`mlflow_mia.option` (core): :func:`~mlflow_mia.option.option`, the field
  declaration (help, flat key, range, which commands use it) on the config dataclasses;
- :mod:`.families`: the option families, a registry (each audit's config classes and the commands and
  methods that take their options; an audit kind registers its own, with its command);
- :mod:`.schema`: options shared by the audits (:class:`~.schema.CommonOptions`) and the
  command-only ones; argparse flags, evaluator-config keys and their errors, the key
  tables of the docs and the MLproject parameters, all derived;
- :mod:`.audit`: :class:`~.audit.MiaOptions` and :func:`~.audit.parse_options` (the
  membership audit's flat ``evaluator_config["mia"]`` keys, parsed once);
- :mod:`.ner`: :class:`~.ner.NerOptions` (the NER audit's prompt tables);
- :mod:`.canary`: :class:`~.canary.CanaryOptions` and :func:`~.canary.parse_canary_config`;
- :mod:`.values`: what every front end shares (an unset MLproject parameter, the
  ``{"mia": {...}}`` wrapper).
"""

# Each built-in audit's options module registers its config family (``families.FAMILIES``) when imported, as each
# attack module registers its attack: importing them here completes the built-in families before any use.
from mlflow_mia.options import audit, canary, ner  # noqa: E402,F401
