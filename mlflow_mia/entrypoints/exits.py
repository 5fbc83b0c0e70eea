"""The exit codes of ``mlflow-mia`` (docs/reference/exit-codes.md), in a module that imports nothing."""

__all__: list[str] = []

# 1 is what Python exits with on an uncaught error, so a failed gate has its own code.
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE_FAILED = 0, 1, 2, 3
#: What each non-zero exit code means, in the words a failed ``mlflow run`` project run records.
EXIT_MEANINGS = {EXIT_ERROR: "the audit broke: a bug or an environment fault", EXIT_USAGE: "usage or input error",
                 EXIT_GATE_FAILED: "the release gate did not pass"}
