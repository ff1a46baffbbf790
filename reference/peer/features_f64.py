"""FlashAttention's features computed by PyTorch in float64: the answers the course's oracle
(reference/src/features.rs) is checked against, written independently of it from the
conventions of FlashAttention-2's `flash_attn_func`:

- sliding window `window_size = (left, right)`, -1 for unbounded: query i sees keys
  i + Nkv - Nq - left ..= i + Nkv - Nq + right; `causal` sets right to 0;
- ALiBi: the bias -slope[h] * |i + Nkv - Nq - j| added to the scaled score;
- softcap c: the scaled score s becomes c * tanh(s / c), before the ALiBi bias;
- dropout p: weight (b, h, i, j) kept when the first word of Philox-4x32-10 with counter
  (j, i, h, b) and key (seed low, seed high) is at least floor(p * 2^32); kept weights are
  divided by 1 - p; the logsumexp is the one before dropout.

O, L and, through autograd, dQ, dK and dV of the loss sum(O * dO) are written for a few fixed
cases (inputs drawn in float32 and stored with the answers, so the check does not depend on
PyTorch's random numbers):

    python3 reference/peer/features_f64.py > reference/tests/data/features_f64.txt

`cargo test -p reference --test features_against_pytorch` reads that file.
"""

import math
import sys

try:
    import torch
except ImportError:
    print("torch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(3)

MASK32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Philox-4x32-10 (Salmon et al., SC 2011) in plain Python integers."""
    c, k = list(counter), list(key)
    for round_ in range(10):
        if round_ > 0:
            k = [(k[0] + 0x9E3779B9) & MASK32, (k[1] + 0xBB67AE85) & MASK32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        hi0, lo0, hi1, lo1 = p0 >> 32, p0 & MASK32, p1 >> 32, p1 & MASK32
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
    return c


# Random123's published test vector: this implementation must reproduce it.
assert philox4x32_10([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def keep_mask(batch, heads, q_len, kv_len, p, seed):
    threshold = int(p * 4294967296.0)
    key = [seed & MASK32, (seed >> 32) & MASK32]
    mask = torch.zeros(batch, heads, q_len, kv_len, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                for j in range(kv_len):
                    word = philox4x32_10([j, i, h, b], key)[0]
                    mask[b, h, i, j] = 1.0 if word >= threshold else 0.0
    return mask


def attention(q, k, v, case):
    """O and L in float64 for q [B,H,Nq,D], k and v [B,H,Nkv,D]."""
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    s = case["scale"] * (q @ k.transpose(-1, -2))
    if case["softcap"] > 0:
        c = case["softcap"]
        s = c * torch.tanh(s / c)
    rows = torch.arange(q_len, dtype=torch.float64).view(-1, 1)
    cols = torch.arange(kv_len, dtype=torch.float64).view(1, -1)
    diagonal = rows + (kv_len - q_len)  # [Nq, 1]
    if case["alibi"] is not None:
        slopes = torch.tensor(case["alibi"], dtype=torch.float64).view(1, heads, 1, 1)
        s = s - slopes * (diagonal - cols).abs()
    left, right = case["window"]
    if case["causal"]:
        right = 0 if right < 0 else min(right, 0)
    visible = torch.ones(q_len, kv_len, dtype=torch.bool)
    if right >= 0:
        visible &= cols <= diagonal + right
    if left >= 0:
        visible &= cols >= diagonal - left
    s = s.masked_fill(~visible, -math.inf)
    row_max = s.amax(dim=-1, keepdim=True)
    sees_any = torch.isfinite(row_max)
    row_max = torch.where(sees_any, row_max, torch.zeros_like(row_max)).detach()
    weights = torch.exp(s - row_max)  # exp(-inf) = 0 where masked
    total = weights.sum(dim=-1, keepdim=True)
    safe_total = torch.where(sees_any, total, torch.ones_like(total))
    probabilities = weights / safe_total
    lse = torch.where(sees_any, row_max + torch.log(safe_total), torch.full_like(total, -math.inf))
    p, seed = case["dropout"]
    if p > 0:
        probabilities = probabilities * keep_mask(batch, heads, q_len, kv_len, p, seed) / (1.0 - p)
    return probabilities @ v, lse.squeeze(-1)


CASES = [
    # name, (B, H, Nq, Nkv, D), scale, causal, window, alibi, softcap, dropout (p, seed); every
    # number exact in float32, as the Rust side holds them in f32
    ("window", (1, 2, 6, 9, 4), 0.5, False, (2, 1), None, 0.0, (0.0, 0)),
    ("window_causal", (2, 1, 7, 7, 3), 0.625, True, (3, -1), None, 0.0, (0.0, 0)),
    ("window_empty_rows", (1, 1, 8, 3, 2), 0.75, True, (0, -1), None, 0.0, (0.0, 0)),
    ("alibi", (1, 3, 5, 8, 4), 0.5, False, (-1, -1), [0.5, 0.25, 0.125], 0.0, (0.0, 0)),
    ("alibi_causal", (2, 2, 8, 5, 3), 0.375, True, (-1, -1), [1.0, 0.0625], 0.0, (0.0, 0)),
    ("softcap", (1, 2, 6, 6, 4), 2.0, False, (-1, -1), None, 3.0, (0.0, 0)),
    ("dropout", (2, 2, 5, 7, 3), 0.625, False, (-1, -1), None, 0.0, (0.25, 12345)),
    ("everything", (2, 2, 7, 9, 4), 0.875, True, (4, -1), [0.5, 0.1875], 5.0, (0.125, 0xDEADBEEF12)),
]


def floats(values):
    return " ".join("-inf" if math.isinf(x) and x < 0 else repr(float(x)) for x in values)


def main():
    generator = torch.Generator().manual_seed(2026)
    print("# written by reference/peer/features_f64.py with torch", torch.__version__)
    for name, dims, scale, causal, window, alibi, softcap, dropout in CASES:
        batch, heads, q_len, kv_len, head_dim = dims
        draw = lambda n: torch.randn(batch, heads, n, head_dim, generator=generator).float()
        q, k, v, d_o = draw(q_len), draw(kv_len), draw(kv_len), draw(q_len)
        case = dict(scale=scale, causal=causal, window=window, alibi=alibi, softcap=softcap,
                    dropout=dropout)
        inputs = [x.double().requires_grad_(True) for x in (q, k, v)]
        o, lse = attention(*inputs, case)
        (o * d_o.double()).sum().backward()
        print("case", name)
        print("shape", batch, heads, q_len, kv_len, head_dim)
        print("scale", repr(scale))
        print("causal", int(causal))
        print("window", *window)
        print("alibi", floats(alibi) if alibi else "none")
        print("softcap", repr(softcap))
        print("dropout", repr(dropout[0]), dropout[1])
        for label, x in [("q", q), ("k", k), ("v", v), ("do", d_o)]:
            print(label, floats(x.flatten().tolist()))
        print("o", floats(o.detach().flatten().tolist()))
        print("lse", floats(lse.detach().flatten().tolist()))
        for label, x in zip(["dq", "dk", "dv"], inputs):
            print(label, floats(x.grad.flatten().tolist()))


if __name__ == "__main__":
    main()
