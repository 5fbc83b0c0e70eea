import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# The store key (signs cache rows) lives in a per-session temporary folder, not in ~/.config.
os.environ.setdefault("MLFLOW_MIA_STORE_KEY_FILE",
                      os.path.join(tempfile.mkdtemp(prefix="mlflow-mia-key-"), "store.key"))
