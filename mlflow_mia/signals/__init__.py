"""Per-sample signals of masked language models (the only layer that runs models).

``compute_signals`` gives the masked energy (Mireshghallah et al. 2022, Eq. 2)
or the pseudo-log-likelihood, plus masked-token log-probs, for a list of texts.
"""

from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.energy import compute_signals, tokenize
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.types import SignalResult

__all__ = ["compute_signals", "tokenize", "MaskedLM", "SignalCache", "SignalResult"]
