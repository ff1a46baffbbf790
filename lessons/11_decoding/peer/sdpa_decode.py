"""PyTorch's CUDA attention for one decoding step (one new query per sequence over a KV cache
of grouped heads), timed the way the course's decode benchmark times its own kernels: a warm-up,
then calls back to back between two CUDA events (GPU time per call), the median of several such
samples.

    python3 sdpa_decode.py --kv-heads 8 --repeats 10 1,32,16384,128,0 8,32,4096,128,0

Each argument is batch,heads,seq,head_dim,causal: `heads` query heads, `seq` tokens in every
sequence's cache, one query per sequence (causal is ignored: the new token sees every cached
key). Prints a first line "# torch VERSION, DEVICE", then CSV: the header
batch,heads,seq,head_dim,causal,backend,seconds and one line per argument and backend, seconds
being the median time of one call (nan where the backend cannot run the problem). The course's
`bench::peer` reads the columns by their names.

Backends, each given the grouped K/V heads as they are (`enable_gqa=True`, no copy):
flash_fp16 (FlashAttention-2), efficient_fp16 and efficient_fp32 (the memory-efficient kernel),
cudnn_fp16, math_fp16; efficient_fp16_expanded_kv and efficient_fp32_expanded_kv, the
memory-efficient kernel on K and V repeated to the query heads before the timing (it refuses
grouped heads, and then reads G times the bytes); flash_attn_kvcache_fp16 (the flash-attn
package's flash_attn_with_kvcache, its split-KV decoding kernel) when that package is
installed; and
flash_fp16_graph and cudnn_fp16_graph, the same calls captured in a CUDA graph and replayed, which
removes Python's launch time between calls (where a call takes less GPU time than Python takes
to launch the next, the eager timings measure the launches; the course's kernels are recorded
back to back, as a graph is); copy_fp16, the time to copy a tensor as large as the K and V cache
once (reading and writing it),
which gives the device's copy bandwidth measured in the same run. Exits with status 3 if torch
or CUDA is missing.

With --device cpu: PyTorch's CPU attention instead (backend cpu_fp32, all of torch's threads,
wall clock around calls back to back; cpu_fp32_expanded_kv where this torch's CPU attention
refuses grouped heads and K and V are repeated to the query heads first) and copy_fp32, a copy
of an f32 tensor the size of the cache.
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

try:
    from flash_attn import flash_attn_with_kvcache
except ImportError:
    flash_attn_with_kvcache = None

# torch.OutOfMemoryError is recent; older versions raise torch.cuda.OutOfMemoryError.
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

SDPA_BACKENDS = [
    ("flash_fp16", SDPBackend.FLASH_ATTENTION, torch.float16),
    ("efficient_fp16", SDPBackend.EFFICIENT_ATTENTION, torch.float16),
    ("efficient_fp32", SDPBackend.EFFICIENT_ATTENTION, torch.float32),
    ("cudnn_fp16", SDPBackend.CUDNN_ATTENTION, torch.float16),
    ("math_fp16", SDPBackend.MATH, torch.float16),
]
# The fastest backends, also timed as CUDA graphs.
GRAPHED = ["flash_fp16", "cudnn_fp16"]


def median_seconds(call, repeats, calls_per_sample):
    """Median GPU seconds of one call, each sample `calls_per_sample` calls back to back."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls_per_sample):
            call()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / calls_per_sample)
    return statistics.median(samples)


def graph_seconds(call, repeats, calls_per_sample):
    """Median GPU seconds of one call, `calls_per_sample` calls captured in one CUDA graph and
    each sample one replay of it."""
    side = torch.cuda.Stream()  # capture needs the warm-up on a side stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_sample):
            call()
    return median_seconds(graph.replay, repeats, 1) / calls_per_sample


def sdpa_call(backend, dtype, b, h, kv_heads, n, d, expand=False):
    """One SDPA call; with `expand`, K and V repeated to the `h` query heads first (outside the
    timing), for a backend that refuses grouped heads: it then reads h / kv_heads times the
    bytes of the grouped cache."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(b, h, 1, d, device="cuda", dtype=dtype)
    k = torch.randn(b, kv_heads, n, d, device="cuda", dtype=dtype)
    v = torch.randn(b, kv_heads, n, d, device="cuda", dtype=dtype)
    if expand:
        k, v = (x.repeat_interleave(h // kv_heads, dim=1) for x in (k, v))
    grouped = k.shape[1] != h

    def call():
        with sdpa_kernel(backend):
            sdpa(q, k, v, enable_gqa=grouped)

    return call


def flash_attn_call(b, h, kv_heads, n, d):
    # flash-attn's layout is [batch, seq, heads, head_dim].
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.float16)
    k = torch.randn(b, n, kv_heads, d, device="cuda", dtype=torch.float16)
    v = torch.randn(b, n, kv_heads, d, device="cuda", dtype=torch.float16)
    lens = torch.full((b,), n, device="cuda", dtype=torch.int32)
    return lambda: flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)


def median_cpu_seconds(call, repeats, calls_per_sample):
    """Median wall seconds of one call on the CPU, each sample calls back to back."""
    for _ in range(3):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls_per_sample):
            call()
        samples.append((time.perf_counter() - start) / calls_per_sample)
    return statistics.median(samples)


def cpu_calls(b, h, kv_heads, n, d):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(b, h, 1, d)
    k = torch.randn(b, kv_heads, n, d)
    v = torch.randn(b, kv_heads, n, d)
    source = torch.randn(2 * b * kv_heads * n * d)
    target = torch.empty_like(source)
    attend = ("cpu_fp32", lambda: sdpa(q, k, v, enable_gqa=kv_heads != h))
    try:
        attend[1]()
    except RuntimeError:
        # This torch's CPU attention refuses grouped heads: repeat them first (outside the
        # timing), so that it reads G times the bytes; named apart so that no one mistakes it.
        k, v = (x.repeat_interleave(h // kv_heads, dim=1) for x in (k, v))
        attend = ("cpu_fp32_expanded_kv", lambda: sdpa(q, k, v))
    return [attend, ("copy_fp32", lambda: target.copy_(source))]


def copy_call(b, kv_heads, n, d):
    source = torch.randn(2 * b * kv_heads * n * d, device="cuda", dtype=torch.float16)
    target = torch.empty_like(source)
    return lambda: target.copy_(source)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--calls", type=int, default=20, help="calls back to back per sample")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    if args.device == "cpu":
        print(f"# torch {torch.__version__}, CPU, {torch.get_num_threads()} threads", flush=True)
        print("batch,heads,seq,head_dim,causal,backend,seconds", flush=True)
        for config in args.configs:
            b, h, n, d, causal = (int(x) for x in config.split(","))
            with torch.no_grad():
                for name, call in cpu_calls(b, h, args.kv_heads, n, d):
                    seconds = median_cpu_seconds(call, args.repeats, 5)
                    print(f"{b},{h},{n},{d},{causal},{name},{seconds}", flush=True)
        return
    if not torch.cuda.is_available():
        print("CUDA is not available to torch", file=sys.stderr)
        sys.exit(3)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print("batch,heads,seq,head_dim,causal,backend,seconds", flush=True)
    for config in args.configs:
        b, h, n, d, causal = (int(x) for x in config.split(","))
        # Every backend on the grouped heads; the memory-efficient kernel, which refuses them,
        # also on K and V repeated to the query heads, named apart so that no one mistakes it
        # for the grouped call.
        variants = [(name, backend, dtype, False) for name, backend, dtype in SDPA_BACKENDS]
        if args.kv_heads != h:
            variants += [
                (f"{name}_expanded_kv", backend, dtype, True)
                for name, backend, dtype in SDPA_BACKENDS
                if name.startswith("efficient")
            ]
        calls = [
            (name, lambda backend=backend, dtype=dtype, expand=expand: sdpa_call(backend, dtype, b, h, args.kv_heads, n, d, expand))
            for name, backend, dtype, expand in variants
        ]
        graphed = [(f"{name}_graph", make) for name, make in calls if name in GRAPHED]
        if flash_attn_with_kvcache is not None:
            calls.append(("flash_attn_kvcache_fp16", lambda: flash_attn_call(b, h, args.kv_heads, n, d)))
        calls.append(("copy_fp16", lambda: copy_call(b, args.kv_heads, n, d)))
        for name, make in calls + graphed:
            timing = graph_seconds if name.endswith("_graph") else median_seconds
            try:
                with torch.no_grad():
                    seconds = timing(make(), args.repeats, args.calls)
            except (RuntimeError, TypeError, OUT_OF_MEMORY):
                seconds = float("nan")
            torch.cuda.empty_cache()
            print(f"{b},{h},{n},{d},{causal},{name},{seconds}", flush=True)


if __name__ == "__main__":
    main()
