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
        Missing population set (with how to provide one), missing columns, bad labels.
    """
    options.require_population()
    if not options.label_column:
        raise ValueError("the membership label column is unknown: pass targets='<column>' to "
                         "mlflow.models.evaluate or label_column in evaluator_config['mia']")
    pool = AuditDataset.from_frame(pool_data, text_column=options.text_column, label_column=options.label_column,
                                   id_column=options.id_column, group_column=options.group_column)
    population = PopulationSet.from_frame(options.population_data, text_column=options.population_text_column,
                                          group_column=options.population_group_column)
    return pool, population
