"""The in-process baseline of bench/torch_bench.ts: a TorchScript model run by torch in this process.

Usage: python bench/torch_inprocess.py MODEL_PT SECONDS THREADS BATCH [BATCH ...]

Loads the model as dinfer's PyTorch backend does (torch.jit.load, eval, inference mode; THREADS intra-op
and 1 inter-op thread as INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT set them, or torch's defaults when
THREADS is 0), feeds the digits samples (examples/models/digits/samples.json) repeated to each batch size, and for
each batch runs forward sequentially for SECONDS after a warm-up. Prints one JSON line: per batch, the
inferences (rows) per second, the median and 99th percentile time of one forward call in microseconds, and the
process CPU time per inference.
"""

import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def main():
    path, seconds, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4:]]
    if threads > 0:
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    samples = json.loads((ROOT / "examples" / "models" / "digits" / "samples.json").read_text())["inputs"]
    module = torch.jit.load(path).eval()
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "points": []}
    for batch in batches:
        rows = [samples[i % len(samples)] for i in range(batch)]
        x = torch.tensor(rows, dtype=torch.float32)
        with torch.inference_mode():
            for _ in range(200):
                module(x)
            times = []
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            end = t0 + seconds
            while True:
                a = time.perf_counter()
                module(x)
                b = time.perf_counter()
                times.append(b - a)
                if b >= end:
                    break
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
        times.sort()
        n = len(times)
        out["points"].append({
            "batch": batch,
            "calls": n,
            "rate": n * batch / wall,
            "p50Us": times[n // 2] * 1e6,
            "p99Us": times[min(n - 1, int(n * 0.99))] * 1e6,
            "cpuUsPerInference": cpu / (n * batch) * 1e6,
        })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
