"""Per-sample signals of masked language models (the only layer that runs models).

``compute_signals`` gives the masked energy (Mireshghallah et al. 2022, Eq. 2)
or the pseudo-log-likelihood, plus masked-token log-probs, for a list of texts;
for a causal LM (:class:`CausalLM`) the mean NLL per predicted token and the
per-token log-probs (:mod:`mlflow_mia.signals.causal`).

The signal kinds: each module below registers its own with
:func:`mlflow_mia.signal_kinds.register_signal_kind` when imported here (a new kind
is its module and one more name in this import).
"""

from mlflow_mia.signals import causal, energy  # noqa: F401  (the signal kinds register themselves)
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.dispatch import compute_signals
from mlflow_mia.signals.energy import tokenize
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.types import SignalResult

__all__ = ["compute_signals", "tokenize", "MaskedLM", "CausalLM", "SignalCache", "SignalResult"]
