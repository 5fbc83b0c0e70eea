import pytest

from mlflow_mia.signals.ner_testing import tiny_token_classifier


@pytest.fixture
def tiny_ner():
    return tiny_token_classifier()
