import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# No system-metrics thread in every test's runs (tests/tracking/test_runs.py turns it on with a short interval).
os.environ.setdefault("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "false")
# The store key (signs cache rows) lives in a per-session temporary folder, not in ~/.config.
os.environ.setdefault("MLFLOW_MIA_STORE_KEY_FILE",
                      os.path.join(tempfile.mkdtemp(prefix="mlflow-mia-key-"), "store.key"))

import pytest  # noqa: E402

# The session's tracking store with tiny registered models, shared by every folder
# (tests/registered_models.py says what it holds).
from registered_models import Store, fresh_weights, restore_experiment, store, tracking  # noqa: E402,F401


@pytest.fixture(scope="session")
def hash_key():
    """The audits' hash key in tests (downstream of the options parser a key is required, never resolved)."""
    from mlflow_mia.hashing import HashKey

    return HashKey.from_bytes(b"tests-hash-key-" * 3, source="tests")


@pytest.fixture
def tiny_ner():
    """A tiny random token classifier (``mlflow_mia.signals.ner_testing.tiny_token_classifier``)."""
    from mlflow_mia.signals.ner_testing import tiny_token_classifier

    return tiny_token_classifier()


@pytest.fixture(scope="module", autouse=True)
def _modules_leave_the_experiment_as_they_found_it():
    """A module-scoped fixture that calls ``mlflow.set_experiment`` (its store for the module's tests) leaves
    ``$MLFLOW_EXPERIMENT_ID`` set after the module: restored here, after the module's own fixtures end."""
    before = os.environ.get("MLFLOW_EXPERIMENT_ID")
    yield
    restore_experiment(before)


@pytest.fixture(autouse=True)
def _forget_the_active_experiment():
    """After each test, forget MLflow's active experiment: the next test's store may not hold it.

    ``mlflow.set_experiment`` keeps the id in a process-wide variable and in
    ``$MLFLOW_EXPERIMENT_ID`` (for subprocesses); a test that points MLflow at another
    store would otherwise start its runs in an experiment id that store lacks
    ("No Experiment with id=2 exists").
    """
    before = os.environ.get("MLFLOW_EXPERIMENT_ID")
    yield
    restore_experiment(before)
