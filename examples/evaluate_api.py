"""Audit a registered model with ``mlflow.models.evaluate`` and the ``mia`` evaluator plugin.

    pip install -e '.[demo]'
    python examples/evaluate_api.py --size small

``data`` is the audited pool (texts with a 0/1 membership column given as ``targets``);
everything else goes into ``evaluator_config["mia"]`` (see
``mlflow_mia.entrypoints.evaluator`` for every key).

``model=None`` with ``target_model`` is the recommended form: the audit loads the model
with its own loader, which never runs code shipped with it. ``model="models:/..."``
would let MLflow's pyfunc loader load it first (and run the code of a model with custom
classes, whatever ``trust_remote_code`` says); the evaluator then warns.
"""

import argparse

import mlflow
import pandas as pd

from mlflow_mia.data import load_table
from mlflow_mia.demo.build import build_demo

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", choices=("default", "small"), default="default", help="demo size")
args = parser.parse_args()

spec = build_demo(size=args.size)
pool_df: pd.DataFrame = load_table(spec.pool_path)
population_df: pd.DataFrame = load_table(spec.population_path)

mlflow.set_experiment("mlflow-mia examples")
with mlflow.start_run(run_name="evaluate bbc-target@candidate"):
    result = mlflow.models.evaluate(
        model=None,  # the audit loads target_model itself: MLflow's pyfunc loader never runs
        data=pool_df, targets=spec.label_column,  # "is_member": 1 = in the training data
        model_type="mia", evaluators=["mia"],
        evaluator_config={"mia": {
            "target_model": spec.target_uri,  # "models:/bbc-target@candidate"
            "reference_model": spec.reference_uri,  # "models:/bbc-reference@champion", an oracle reference
            "population_data": population_df,  # or a csv/jsonl/parquet path
            "text_column": spec.text_column, "group_column": spec.group_column, "id_column": spec.id_column,
            "attacks": ["loss", "likelihood_ratio"],
            "signal": "energy", "num_masks": 10, "mask_rate": 0.15, "seed": 0,
            # The small demo's 300 population texts cannot resolve FPR 0.001 (that needs 1,000).
            "fprs": [0.1, 0.01, 0.001] if args.size == "default" else [0.1, 0.01],
            "log_texts": False,
            "log_samples": False,  # True adds per-sample scores: a membership oracle for readers of the run
            "max_tpr_at_fpr": "0.01:0.05",  # optional release gate -> tag mia.gate=pass|fail|inconclusive
        }})

print({k: round(v, 3) for k, v in result.metrics.items() if k.endswith(("/auc", "/tpr_at_fpr_0.01"))})
print("artifacts:", sorted(result.artifacts))
print("report:", result.artifacts["report"].uri)
