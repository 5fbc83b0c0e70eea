"""Zlib-ratio attack: the energy calibrated by the text's zlib entropy.

Carlini et al. (2021), "Extracting Training Data from Large Language Models",
USENIX Security, Sec. 5.1: the ratio of model perplexity to zlib compression
length. Here: the masked energy over the zlib-compressed length in bytes.
"""

import zlib

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack


def zlib_length(text: str) -> int:
    """Bytes of the zlib-compressed UTF-8 text (level 9)."""
    return len(zlib.compress(text.encode("utf-8"), 9))


@register_attack
class ZlibAttack(Attack):
    """Score = ``-E(s; theta) / zlib_length(s)`` (energy in nats per compressed byte; higher = member).

    For a causal target the numerator is the mean NLL per predicted token (nats/token),
    Carlini et al.'s ratio as MIMIR's ``ZLIBAttack`` computes it (``loss /
    len(zlib.compress(text))``). We differ from MIMIR in the compression level (9, the
    smallest output, where MIMIR uses zlib's default 6: a few bytes apart on short
    texts) and in the sign (higher = member here).
    """

    name = "zlib"
    citation = "Carlini et al. 2021"
    requires = ("target",)
    gate_min_references = 0
    gate_order = 20

    def score(self, inputs):
        lengths = np.array([zlib_length(t) for t in inputs.texts], dtype=np.float64)
        return -inputs.target.values / lengths  # lower energy per compressed byte = member
