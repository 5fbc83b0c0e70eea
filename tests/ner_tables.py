"""NER test tables shared by tests/audits/ner and tests/entrypoints: prompt sets and a names table."""

import numpy as np
import pandas as pd

from mlflow_mia.signals.testing import WORDS

WORDS_ALPHA = [w for w in WORDS if w.isalpha()]
PROMPTS = pd.DataFrame({"prompt": ["the cat sat on {name} .", "{name} ran to the bank today", "good dog , {name} !",
                                   "was {name} a big red dog ?"],
                        "entity_type": "PER", "sentence_type": ["declarative", "declarative", "exclamatory",
                                                                "interrogative"]})
HAND = pd.DataFrame({"prompt": ["{name} is", "the {name}", "a {name} dog", "{name} sat", "one {name}"],
                     "entity_type": "PER", "sentence_type": "declarative"})


def names_table(n=24, seed=0):
    rng = np.random.default_rng(seed)
    names = list(dict.fromkeys(" ".join(rng.choice(WORDS_ALPHA, size=2)) for _ in range(4 * n)))[:n]
    return pd.DataFrame({"name": names, "entity_type": "PER", "is_member": [1, 0] * (n // 2)})
