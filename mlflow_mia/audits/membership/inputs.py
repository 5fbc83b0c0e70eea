"""The membership audit's inputs from tables: the pool and the population set, by the parsed options."""

from __future__ import annotations

from mlflow_mia.options.audit import MiaOptions
from mlflow_mia.data import AuditDataset, PopulationSet

__all__ = ["load_inputs"]


def load_inputs(pool_data, options: MiaOptions):
    """Build ``(AuditDataset, PopulationSet)`` from tables and the parsed options.

    Raises
    ------
    ValueError
        Missing population set (:func:`require_population`), missing columns (a ``population_group_column``
        given explicitly included; the pool's ``group_column``, carried over by default, is used only where the
        population set has it), bad labels.
    """
    require_population(options.population_data)
    if not options.label_column:
        raise ValueError("the membership label column is unknown: pass targets='<column>' to "
                         "mlflow.models.evaluate or label_column in evaluator_config['mia']")
    pool = AuditDataset.from_frame(pool_data, text_column=options.text_column, label_column=options.label_column,
                                   id_column=options.id_column, group_column=options.group_column)
    # an explicit population_group_column must exist; the pool's group_column is carried over where it exists
    explicit = options.population_group_column
    population = PopulationSet.from_frame(options.population_data,
                                          text_column=options.population_text_column or options.text_column,
                                          group_column=explicit or options.group_column,
                                          group_key="population_group_column" if explicit else None)
    return pool, population


def require_population(population_data) -> None:
    """Raise the error that explains how to provide a population set, when ``population_data`` is missing.

    Raises
    ------
    ValueError
        ``population_data`` is None or an empty string.
    """
    if population_data is None or (isinstance(population_data, str) and not population_data):
        raise ValueError(
            "a population set is required: texts from the same distribution as the members, disjoint from "
            "the audited pool; the attack thresholds are its score quantiles (Mireshghallah et al. 2022, "
            "Sec. 2.4). Provide it as evaluator_config={'mia': {'population_data': <DataFrame or "
            ".csv/.jsonl/.parquet path>, ...}} or, on the command line, --population PATH")
