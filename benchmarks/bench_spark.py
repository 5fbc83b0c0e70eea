"""Signals on a local Spark session vs ``compute_signals`` in one process, same cores.

Run::

    python benchmarks/bench_spark.py                       # 2,000 texts; memory over 2,000 and 20,000
    python benchmarks/bench_spark.py --memory-texts 5000   # smaller memory run

What it prints, on the demo-shaped model (BERT, 2 layers, hidden 128, a WordPiece
vocabulary of 8,000 learnt from the BBC corpus; randomly initialised: speed and
equality do not depend on the weights) and real BBC News sentences:

* startup time of a ``local[2]`` session (``spark.task.cpus=1``: two tasks of one
  torch thread each), and of the first job (Python workers importing torch and
  loading the model);
* the largest absolute difference between the energies from Spark and from
  ``compute_signals`` over the same texts (target: <= 1e-5);
* throughput of both on the same 2 cores (single process: 2 torch threads) and
  their ratio (goal: Spark >= 0.8x); each timed twice, alternating;
* peak resident memory of each Python worker (executor side) while it computes
  ``--memory-texts`` texts, next to the 2,000-text run: flat means memory does not
  grow with the data;
* a projection (not a measurement) of the wall time of 1M and 10M texts on 8 and
  64 one-core task slots at the measured per-task rate.

It writes ``benchmarks/results/bench_spark.json`` (``--no-write`` skips it): per
round, Spark's time against one process at its faster thread setting of that round.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

N_TEXTS = 2000


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct BBC News body sentences of 5-60 words (repeated with a suffix when n exceeds the corpus)."""
    from mlflow_mia.demo.bbc import load_sentences

    pool = list(dict.fromkeys(load_sentences(min_words=5, max_words=60)["text"]))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    return [pool[order[i % len(pool)]] + ("" if i < len(pool) else f" ({i // len(pool)})") for i in range(n)]


def demo_model(path: str, texts: list[str]) -> str:
    """A demo-shaped BERT (2 x 128, 8k WordPiece vocabulary) saved to ``path``."""
    from mlflow_mia.demo.train import ModelSpec, new_model, train_tokenizer

    spec = ModelSpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, vocab_size=8000)
    tok = train_tokenizer(texts, vocab_size=spec.vocab_size, model_max_length=spec.max_position_embeddings)
    model = new_model(tok, spec, seed=0).eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


class WorkerMemory:
    """Peak resident memory (MiB) of every Spark Python worker process, sampled every 0.1 s."""

    def __init__(self):
        self.peak: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _workers() -> list[int]:
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if b"pyspark.daemon" in f.read():
                            out.append(int(pid))
                except OSError:
                    pass
        return out

    def _run(self):
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            for pid in self._workers():
                try:
                    with open(f"/proc/{pid}/statm") as f:
                        rss = int(f.read().split()[1]) * page / 2**20
                except (OSError, ValueError, IndexError):
                    continue
                self.peak[pid] = max(self.peak.get(pid, 0.0), rss)
            time.sleep(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def workers(self, floor_mib: float = 200.0) -> list[float]:
        """Peaks of the processes that loaded torch (the daemon itself stays small)."""
        return sorted((v for v in self.peak.values() if v > floor_mib), reverse=True)


def spark_run(spark, texts, model_dir, config):
    import pandas as pd

    from mlflow_mia.engines.spark_executors import collect_signals, spark_signals

    ids = np.arange(len(texts), dtype=np.int64)
    df = spark.createDataFrame(pd.DataFrame({"id": ids, "text": texts})).repartition(2)
    start = time.perf_counter()
    job = spark_signals(df, model_dir, config, check_ids=False)
    res = collect_signals(job.frame, ids)
    return res, time.perf_counter() - start


def local_run(texts, model_dir, config, threads: int):
    import torch

    from mlflow_mia.signals import MaskedLM, compute_signals

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lm = MaskedLM.from_pretrained(model_dir)
        start = time.perf_counter()
        res = compute_signals(lm, texts, config, progress=False, device="cpu")
        return res, time.perf_counter() - start
    finally:
        torch.set_num_threads(before)


def projection(rate_per_task: float, startup_s: float) -> None:
    print("\nprojection (NOT measured): wall time = startup + texts / (task slots x measured per-task rate)")
    print(f"  per-task rate {rate_per_task:.1f} texts/s (this model, this CPU); startup {startup_s:.0f} s")
    for n in (1_000_000, 10_000_000):
        for slots in (8, 64):
            hours = (startup_s + n / (slots * rate_per_task)) / 3600
            print(f"  {n:>10,} texts on {slots:>2} one-core task slots: {hours:6.2f} h")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=N_TEXTS)
    parser.add_argument("--memory-texts", type=int, default=20000, help="texts of the memory run (0: skip)")
    parser.add_argument("--num-masks", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/bench_spark.json")
    args = parser.parse_args(argv)
    load_start = [round(x, 2) for x in os.getloadavg()]

    import tempfile

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.engines.spark import spark_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    config = SignalConfig(num_masks=args.num_masks)
    texts = sentences(max(args.texts, args.memory_texts))
    work = tempfile.mkdtemp(prefix="bench-spark-")
    model_dir = demo_model(os.path.join(work, "model"), texts[:args.texts])
    print(f"{args.texts} BBC sentences, K = {config.num_masks}, demo-shaped BERT 2 x 128, 8k vocabulary; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")

    start = time.perf_counter()
    spark = spark_session("local[2]", app_name="bench-spark", conf={
        "spark.ui.showConsoleProgress": "false", "spark.task.cpus": "1", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - start
    _, first = spark_run(spark, texts[:8], model_dir, config)
    print(f"session startup {startup:.1f} s; first job (workers import torch, load the model) {first:.1f} s")

    sample = texts[:args.texts]
    timings = {"spark": [], "local": [], "local_1_thread": []}
    with WorkerMemory() as mem_small:
        for _ in range(2):
            res_spark, t = spark_run(spark, sample, model_dir, config)
            timings["spark"].append(t)
            res_local, t = local_run(sample, model_dir, config, threads=2)
            timings["local"].append(t)
            timings["local_1_thread"].append(local_run(sample, model_dir, config, threads=1)[1])
    diff = float(np.max(np.abs(res_spark.values - res_local.values)))
    print(f"max |energy(Spark) - energy(compute_signals)| = {diff:.2e} nats over {len(sample)} texts "
          f"({'OK' if diff <= 1e-5 else 'ABOVE 1e-5'})")
    best = {k: min(v) for k, v in timings.items()}
    labels = {"spark": "Spark local[2], 2 tasks x 1 thread", "local": "one process, 2 torch threads",
              "local_1_thread": "one process, 1 torch thread"}
    for k, label in labels.items():
        runs = ", ".join(f"{t:.1f} s" for t in timings[k])
        print(f"  {label:<36}: {len(sample) / best[k]:7.1f} texts/s (runs: {runs})")
    print(f"throughput ratio Spark / one process on the same 2 cores: {best['local'] / best['spark']:.2f}x "
          "(goal >= 0.8x)")
    print(f"per-core ratio (Spark per task / one process with 1 thread): "
          f"{best['local_1_thread'] / best['spark'] / 2:.2f}x")
    print(f"peak RSS per Python worker, {len(sample)} texts: "
          + ", ".join(f"{v:.0f} MiB" for v in mem_small.workers()))
    if args.memory_texts:
        with WorkerMemory() as mem_big:
            _, t = spark_run(spark, texts[:args.memory_texts], model_dir, config)
        print(f"peak RSS per Python worker, {args.memory_texts} texts ({t:.0f} s): "
              + ", ".join(f"{v:.0f} MiB" for v in mem_big.workers()))
    projection(len(sample) / best["spark"] / 2, startup + first)
    spark.stop()
    if not args.no_write:
        write_json(timings, diff, len(sample), load_start)


def write_json(timings: dict, diff: float, n: int, load_start) -> None:
    """``benchmarks/results/bench_spark.json``: Spark against one process at its best thread setting, per pair."""
    import statistics

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import write_result

    anchor = [min(a, b) for a, b in zip(timings["local"], timings["local_1_thread"])]  # the best local setting
    ratios = [a / o for a, o in zip(anchor, timings["spark"])]
    row = {"anchor": "compute_signals in one process", "anchor_best": "best of 1 and 2 torch threads, per round",
           "anchor_s": anchor, "ours_s": timings["spark"], "ratios": [round(r, 3) for r in ratios],
           "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
           "ratio_max": round(max(ratios), 3), "anchor_median_s": round(statistics.median(anchor), 3),
           "ours_median_s": round(statistics.median(timings["spark"]), 3), "texts": n, "max_abs_diff_nats": diff}
    write_result("bench_spark", {"cases": {"spark_local2": row}, "load_start": load_start}, quick=False)


if __name__ == "__main__":
    main()
