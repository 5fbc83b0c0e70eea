"""Inputs of the NER prompt memorization audit (Xia et al. 2025): names and prompts.

:mod:`mlflow_mia.ner.names` reads BIO-tagged corpora and builds the detection set
(in-sample vs out-of-sample entity names, balanced per type, dev/test split);
:mod:`mlflow_mia.ner.prompts` loads and validates the prompt templates. Both are
data-layer modules: no model is run here.
"""

__all__ = ["names", "prompts"]
