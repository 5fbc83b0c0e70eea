"""The membership audit's inputs: which population column gives the user-level groups.

An explicit ``population_group_column`` must name a column of the population set (the error names the option
and the closest column); the pool's ``group_column``, carried over when none is given, is used only where the
population set has that column.
"""

from __future__ import annotations

import pandas as pd
import pytest

from mlflow_mia.audits.membership.kind import MEMBERSHIP
from mlflow_mia.option import OptionError

POOL = pd.DataFrame({"text": ["a b", "c d", "e f", "g h"], "is_member": [1, 0, 1, 0], "user": ["u1", "u2", "u1", "u3"]})


def _inputs(population, **keys):
    settings = MEMBERSHIP.parse({"mia": {"population_data": population, "group_column": "user", **keys}},
                                targets="is_member")
    return MEMBERSHIP.load_inputs(POOL, settings)


def test_the_pools_group_column_is_carried_over_where_the_population_has_it():
    with_users = pd.DataFrame({"text": ["x y", "z w"], "user": ["p1", "p2"]})
    _, population = _inputs(with_users)
    assert list(population.groups) == ["p1", "p2"]
    _, population = _inputs(pd.DataFrame({"text": ["x y", "z w"]}))  # no such column: no population groups
    assert population.groups is None


def test_an_explicit_population_group_column_is_used_and_must_exist():
    table = pd.DataFrame({"text": ["x y", "z w"], "author": ["p1", "p2"], "user": ["q1", "q2"]})
    _, population = _inputs(table, population_group_column="author")
    assert list(population.groups) == ["p1", "p2"]
    with pytest.raises(OptionError, match=r"the population set has no column 'authr'; did you mean 'author'\?.*"
                                          r"name the right column with"):
        _inputs(table, population_group_column="authr")
