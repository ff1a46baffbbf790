"""PyTorch's CUDA scaled_dot_product_attention, timed the way the course's GPU benchmark times
its own kernels: CUDA events around each call (GPU time), warm-up calls (at least 3, and for at
least a second: after an idle spell the GPU's clock rises only after up to a second under
load), then the median of several calls on two alternating input sets.

    python3 sdpa_gpu.py --repeats 20 4,16,1024,64,0 4,16,4096,64,1

Each argument is batch,heads,seq,head_dim,causal. Prints a first line "# torch VERSION, DEVICE",
then CSV: the header batch,heads,seq,head_dim,causal,backend,seconds and one line per argument
and backend, seconds being the median (nan when the backend cannot run the problem, e.g. out of
memory). The course's `bench::peer` reads the columns by their names. Backends: math_fp32,
efficient_fp32 (memory-efficient kernel), flash_fp16 (FlashAttention-2), cudnn_fp16 (cuDNN's
fused attention). Exits with status 3 if torch or CUDA is missing.
"""

import argparse
import statistics
import sys
import time

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("torch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(3)

BACKENDS = [
    ("math_fp32", SDPBackend.MATH, torch.float32),
    ("efficient_fp32", SDPBackend.EFFICIENT_ATTENTION, torch.float32),
    ("flash_fp16", SDPBackend.FLASH_ATTENTION, torch.float16),
    ("cudnn_fp16", SDPBackend.CUDNN_ATTENTION, torch.float16),
]
WARM_UP_CALLS = 3
WARM_UP_SECONDS = 1.0


def time_backend(backend, dtype, b, h, n, d, causal, repeats):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    inputs = [[torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(2)]
    times = []
    with torch.no_grad(), sdpa_kernel(backend):
        warm_up_start = time.perf_counter()
        calls = 0
        while calls < WARM_UP_CALLS or time.perf_counter() - warm_up_start < WARM_UP_SECONDS:
            q, k, v = inputs[calls % 2]
            sdpa(q, k, v, is_causal=causal)
            torch.cuda.synchronize()
            calls += 1
        for r in range(repeats):
            q, k, v = inputs[r % 2]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sdpa(q, k, v, is_causal=causal)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available to torch", file=sys.stderr)
        sys.exit(3)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print("batch,heads,seq,head_dim,causal,backend,seconds", flush=True)
    for config in args.configs:
        b, h, n, d, causal = (int(x) for x in config.split(","))
        for name, backend, dtype in BACKENDS:
            try:
                seconds = time_backend(backend, dtype, b, h, n, d, bool(causal), args.repeats)
            except (RuntimeError, torch.OutOfMemoryError):
                seconds = float("nan")
            torch.cuda.empty_cache()
            print(f"{b},{h},{n},{d},{causal},{name},{seconds}", flush=True)


if __name__ == "__main__":
    main()
