"""Write (or check) the files generated from the option declarations: ``MLproject`` and ``docs/reference/options.md``.

::

    python -m mlflow_mia.entrypoints.generate            # rewrite both files
    python -m mlflow_mia.entrypoints.generate --check    # exit 1 when either is out of date
    python -m mlflow_mia.entrypoints.generate --declarations   # every option key and where it is declared

The rendering is :mod:`mlflow_mia.options.generate`; this script sits in the entry-point layer
because it first imports :mod:`mlflow_mia.pipeline`, which registers every audit kind (and, through
its ``audits/<kind>/`` folder, the kind's option family), as the CLI and the evaluator do.
"""

from __future__ import annotations

import sys

import mlflow_mia.pipeline  # noqa: F401  (every audit kind, with its option family)
from mlflow_mia.options.generate import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
