"""Audit a registered model with ``mlflow.models.evaluate`` and the ``mia`` evaluator plugin.

    pip install -e '.[demo]'
    python examples/evaluate_api.py --size small
    python examples/evaluate_api.py --size small --max-tpr-at-fpr 0.1:0.5   # with a release gate

``data`` is the audited pool (texts with a 0/1 membership column given as ``targets``);
everything else goes into ``evaluator_config["mia"]`` (see
``mlflow_mia.entrypoints.evaluator`` for every key). The pool and the population set are
the demo's tables (``spec.pool_path``, ``spec.population_path``), read with ``load_table``.

``model=None`` with ``target_model`` is the recommended form: the audit loads the model
with its own loader, which never runs code shipped with it. ``model="models:/..."``
would let MLflow's pyfunc loader load it first (and run the code of a model with custom
classes, whatever ``trust_remote_code`` says); the evaluator then warns.

Prints the verdict and, with a gate, the gate's result, and exits as ``mlflow-mia audit``
does: 0 done (gate passed or none set), 1 the audit broke, 2 usage or input error, 3 the
release gate did not pass. A gate writes ``mia.gate`` on the demo's registered version (a
``fail`` stays until an audit at least as strong passes with ``clear_gate_fail``); the
script says so when it does.
"""

import argparse
import sys

import mlflow
import pandas as pd

from mlflow_mia.data import load_table
from mlflow_mia.demo.build import build_demo

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", choices=("default", "small"), default="default", help="demo size")
parser.add_argument("--max-tpr-at-fpr", default="", help="optional release gate, e.g. 0.01:0.05 (tags the version)")
args = parser.parse_args()

spec = build_demo(size=args.size)
pool_df: pd.DataFrame = load_table(spec.pool_path)
population_df: pd.DataFrame = load_table(spec.population_path)
mia = {
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
}
if args.max_tpr_at_fpr:
    mia["max_tpr_at_fpr"] = args.max_tpr_at_fpr  # release gate -> tag mia.gate=pass|fail|inconclusive

mlflow.set_experiment("mlflow-mia")
try:
    with mlflow.start_run(run_name=f"evaluate {spec.target_uri.split('/')[-1]}") as run:
        result = mlflow.models.evaluate(
            model=None,  # the audit loads target_model itself: MLflow's pyfunc loader never runs
            data=pool_df, targets=spec.label_column,  # "is_member": 1 = in the training data
            model_type="mia", evaluators=["mia"], evaluator_config={"mia": mia})
except ValueError as exc:  # a bad key or input: the message names it
    print(f"evaluate_api.py: error: {exc}", file=sys.stderr)
    sys.exit(2)

print({k: round(v, 3) for k, v in result.metrics.items() if k.endswith(("/auc", "/tpr_at_fpr_0.01"))})
print("report:", result.artifacts["report"].uri)
tags = mlflow.MlflowClient().get_run(run.info.run_id).data.tags
print(f"verdict: {tags['mia.verdict']} ({tags['mia.verdict.reason']})")
gate = tags.get("mia.gate")
if gate is not None:
    print(f"release gate {args.max_tpr_at_fpr}: {gate}; tagged mia.gate={gate} on {spec.target_uri}"
          + (" (a fail stays there until an audit at least as strong passes with clear_gate_fail)"
             if gate == "fail" else ""))
sys.exit(0 if gate in (None, "pass") else 3)
