"""A GPT-2 forward pass in PyTorch (random weights, no transformers needed), timed the way
lesson 12's benchmark times its own: wall-clock from the call until the device has finished,
the logits left on the device, a few warm-up calls, then the median of several calls.

    python3 gpt2_forward.py --device cuda --layers 12 --vocab 50257 1,12,1024,64,1

Each argument is batch,heads,seq,head_dim,causal: a model of heads x head_dim channels (GPT-2
small: 12 x 64), the sequence length, always causal. Prints a first line "# torch VERSION,
DEVICE", then CSV: batch,heads,seq,head_dim,causal,backend,seconds (nan when a backend cannot
run, e.g. out of memory); the course's `bench::peer` reads the columns by name.

Backends, the attention of every layer through F.scaled_dot_product_attention:
  on cuda: math_fp32 (standard attention: S and P in memory), efficient_fp32 (a fused
  memory-efficient kernel), flash_fp16 (FlashAttention-2; the whole model in fp16, as
  flash-attn accepts only fp16 and bf16);
  on cpu: cpu_fp32 (PyTorch's choice of CPU kernel, all threads).
Exits with status 3 if torch (or CUDA, for --device cuda) is missing.
"""

import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("torch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(3)

CUDA_BACKENDS = [
    ("math_fp32", SDPBackend.MATH, torch.float32),
    ("efficient_fp32", SDPBackend.EFFICIENT_ATTENTION, torch.float32),
    ("flash_fp16", SDPBackend.FLASH_ATTENTION, torch.float16),
]
CPU_BACKENDS = [("cpu_fp32", None, torch.float32)]


class Gpt2:
    """GPT-2's forward pass: embeddings, pre-LayerNorm blocks, final LayerNorm, tied head.
    Linear weights are [in, out] as GPT-2's Conv1D stores them."""

    def __init__(self, vocab, positions, channels, layers, heads, device, dtype):
        def normal(*shape, std=0.02):
            return torch.randn(*shape, device=device, dtype=dtype) * std

        c = channels
        self.heads = heads
        self.wte, self.wpe = normal(vocab, c), normal(positions, c)
        ones, zeros = torch.ones(c, device=device, dtype=dtype), torch.zeros(c, device=device, dtype=dtype)
        self.blocks = [
            dict(
                ln_1=(ones, zeros),
                c_attn=(normal(c, 3 * c), normal(3 * c)),
                c_proj=(normal(c, c), normal(c)),
                ln_2=(ones, zeros),
                c_fc=(normal(c, 4 * c), normal(4 * c)),
                mlp_proj=(normal(4 * c, c), normal(c)),
            )
            for _ in range(layers)
        ]
        self.ln_f = (ones, zeros)

    def forward(self, tokens):
        n = tokens.shape[-1]
        x = self.wte[tokens] + self.wpe[:n]
        c = x.shape[-1]
        for block in self.blocks:
            a = F.layer_norm(x, (c,), *block["ln_1"], eps=1e-5)
            q, k, v = (a @ block["c_attn"][0] + block["c_attn"][1]).split(c, dim=-1)
            q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(-3, -2) for t in (q, k, v))
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + heads.transpose(-3, -2).flatten(-2) @ block["c_proj"][0] + block["c_proj"][1]
            a = F.layer_norm(x, (c,), *block["ln_2"], eps=1e-5)
            hidden = F.gelu(a @ block["c_fc"][0] + block["c_fc"][1], approximate="tanh")
            x = x + hidden @ block["mlp_proj"][0] + block["mlp_proj"][1]
        x = F.layer_norm(x, (c,), *self.ln_f, eps=1e-5)
        return x @ self.wte.T


def time_forward(model, backend, tokens, device, repeats):
    def wait():
        if device == "cuda":
            torch.cuda.synchronize()

    times = []
    with torch.no_grad():
        for r in range(2 + repeats):
            start = time.perf_counter()
            if backend is None:
                model.forward(tokens)
            else:
                with sdpa_kernel(backend):
                    model.forward(tokens)
            wait()
            if r >= 2:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available to torch", file=sys.stderr)
        sys.exit(3)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"# torch {torch.__version__}, {name}", flush=True)
    print("batch,heads,seq,head_dim,causal,backend,seconds", flush=True)
    torch.manual_seed(0)
    backends = CUDA_BACKENDS if args.device == "cuda" else CPU_BACKENDS
    for config in args.configs:
        b, h, n, d, causal = (int(x) for x in config.split(","))
        positions = max(args.positions, n)
        for backend_name, backend, dtype in backends:
            model = None
            try:
                model = Gpt2(args.vocab, positions, h * d, args.layers, h, args.device, dtype)
                tokens = torch.randint(0, args.vocab, (b, n), device=args.device)
                seconds = time_forward(model, backend, tokens, args.device, args.repeats)
            except (RuntimeError, torch.OutOfMemoryError):
                seconds = math.nan
            del model
            if args.device == "cuda":
                torch.cuda.empty_cache()
            print(f"{b},{h},{n},{d},{causal},{backend_name},{seconds}", flush=True)


if __name__ == "__main__":
    main()
