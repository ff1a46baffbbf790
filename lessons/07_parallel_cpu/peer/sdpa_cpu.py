"""PyTorch's CPU scaled_dot_product_attention, timed the way the course's benchmark times its
own kernels: fp32, the same thread count, one warm-up, then the median of several runs on two
alternating input sets.

    python3 sdpa_cpu.py --threads 2 --repeats 3 1,8,4096,64,0 4,8,1024,64,1

Each argument is batch,heads,seq,head_dim,causal. Prints a first line "# torch VERSION, T threads",
then CSV: the header batch,heads,seq,head_dim,causal,backend,seconds and one line per argument
(backend cpu_fp32, seconds the median). The course's `bench::peer` reads the columns by their
names. Exits with status 3 if torch is missing.
"""

import argparse
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("torch is not installed (pip install torch numpy)", file=sys.stderr)
    sys.exit(3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    print("batch,heads,seq,head_dim,causal,backend,seconds", flush=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for config in args.configs:
        b, h, n, d, causal = (int(x) for x in config.split(","))
        inputs = [[torch.randn(b, h, n, d) for _ in range(3)] for _ in range(2)]
        with torch.no_grad():
            sdpa(*inputs[0], is_causal=bool(causal))  # warm-up
            times = []
            for r in range(args.repeats):
                q, k, v = inputs[r % 2]
                start = time.perf_counter()
                sdpa(q, k, v, is_causal=bool(causal))
                times.append(time.perf_counter() - start)
        print(f"{b},{h},{n},{d},{causal},cpu_fp32,{statistics.median(times)}", flush=True)


if __name__ == "__main__":
    main()
