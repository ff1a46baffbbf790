"""What TF32 does to a backward check against an fp32 reference: attention's gradients in
PyTorch, once with fp32 matrix products and once with TF32 ones, against float64.

    python3 lab/peer/tf32_trap.py

On a CUDA GPU, for a few shapes: Q, K, V and dO standard normal in fp32; O = softmax(Q K^T /
sqrt(D)) V written out in plain operations (no fused kernel), and dQ, dK, dV through autograd,
once with torch.set_float32_matmul_precision("highest") (fp32 products) and once with "high"
(TF32 products: on Ampere and later GPUs, 10 bits of mantissa per input instead of 23), each
against the same computation in float64 on the same inputs. Then the check a learner writes:
the TF32 gradients against the fp32 ones with torch.testing.assert_close's float32 tolerance.
Last, Triton's tl.dot on fp32 inputs with its default input precision and with "ieee", if
Triton is installed (it comes with PyTorch's CUDA wheels).

Prints a first line "Device: GPU (torch VERSION, CUDA VERSION, driver VERSION); DATE", then the
tables. Exits with status 3 if torch or CUDA is missing.
"""

import datetime
import math
import subprocess
import sys
import warnings

try:
    import torch
except ImportError:
    print("torch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(3)

# PyTorch warns that the TF32 switches are being renamed; the warning is not the measurement.
warnings.filterwarnings("ignore")

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    def product(a_ptr, b_ptr, c_ptr, K: tl.constexpr, N: tl.constexpr, BLOCK: tl.constexpr,
                IEEE: tl.constexpr):
        """c = a b for row-major fp32 a [M, K] and b [K, N], one BLOCK x BLOCK tile per program."""
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ks = tl.arange(0, K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :])
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :])
        if IEEE:
            c = tl.dot(a, b, input_precision="ieee")
        else:
            c = tl.dot(a, b)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], c)

SHAPES = [(1, 8, 1024, 64), (1, 8, 4096, 128)]  # batch, heads, seq, head_dim
# torch.testing.assert_close's default tolerance for float32: |a - b| <= atol + rtol |b|.
RTOL, ATOL = 1.3e-6, 1e-5


def attention(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


def forward_and_gradients(q, k, v, d_o):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = attention(q, k, v)
    o.backward(d_o)
    return [o.detach(), q.grad, k.grad, v.grad]


def relative_error(x, exact):
    """max |x - exact| / max |exact|: the error in units of the tensor's largest element."""
    return ((x.double() - exact).abs().max() / exact.abs().max()).item()


def mismatches(a, b):
    """How many elements of a fail torch.testing.assert_close(a, b) at float32's tolerance."""
    return int(((a - b).abs() > ATOL + RTOL * b.abs()).sum().item())


def driver_version():
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def attention_tables():
    errors, checks = [], []
    for b, h, n, d in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v, d_o = (
            torch.randn(b, h, n, d, device="cuda", generator=gen) for _ in range(4)
        )
        exact = forward_and_gradients(*(t.double() for t in (q, k, v, d_o)))
        results = {}
        for precision, label in (("highest", "fp32"), ("high", "TF32")):
            torch.set_float32_matmul_precision(precision)
            results[label] = forward_and_gradients(q, k, v, d_o)
            torch.cuda.synchronize()
            row = [relative_error(x, e) for x, e in zip(results[label], exact)]
            errors.append((f"{b} {h} {n} {d}", f'{label} ("{precision}")', row))
        torch.set_float32_matmul_precision("highest")
        counts = [mismatches(t, f) for t, f in zip(results["TF32"][1:], results["fp32"][1:])]
        checks.append((f"{b} {h} {n} {d}", counts, b * h * n * d))
        del q, k, v, d_o, exact, results
        torch.cuda.empty_cache()
    return errors, checks


def triton_rows():
    """Triton's tl.dot on fp32 [1024, 64] x [64, 1024], default precision and "ieee"."""
    if triton is None:
        return None, ["  not measured: triton is not installed"]
    m, k, block = 1024, 64, 64
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(m, k, device="cuda", generator=gen)
    b = torch.randn(k, m, device="cuda", generator=gen)
    exact = a.double() @ b.double()
    lines = []
    for ieee, label in ((False, "tl.dot(a, b), the default"), (True, 'tl.dot(a, b, input_precision="ieee")')):
        c = torch.empty(m, m, device="cuda")
        try:
            product[(m // block, m // block)](a, b, c, K=k, N=m, BLOCK=block, IEEE=ieee)
            torch.cuda.synchronize()
            lines.append(f"  {label:<42} {relative_error(c, exact):9.2e}")
        except Exception as error:  # a Triton too old for input_precision, a compiler failure
            lines.append(f"  {label:<42} not measured: {type(error).__name__}: {error}"[:200])
    return triton.__version__, lines


def main():
    if not torch.cuda.is_available():
        print("CUDA is not available to torch", file=sys.stderr)
        sys.exit(3)
    name = torch.cuda.get_device_name()
    print(
        f"Device: {name} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"driver {driver_version()}); {datetime.date.today().isoformat()}"
    )
    print(
        "PyTorch's defaults: torch.get_float32_matmul_precision() = "
        f'"{torch.get_float32_matmul_precision()}", '
        f"torch.backends.cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32}"
    )
    print()
    errors, checks = attention_tables()
    print("O = softmax(Q K^T / sqrt(D)) V in plain operations, dQ, dK, dV by autograd; error:")
    print("max |x - x64| / max |x64| against the same computation in float64 on the same inputs")
    print(f"{'B H N D':<14}{'matmuls':<18}{'O':>10}{'dQ':>10}{'dK':>10}{'dV':>10}")
    for shape, label, row in errors:
        print(f"{shape:<14}{label:<18}" + "".join(f"{x:10.2e}" for x in row))
    print()
    print("TF32 gradients against the fp32 ones, elements outside torch.testing.assert_close's")
    print(f"float32 tolerance (|a - b| <= {ATOL:g} + {RTOL:g} |b|):")
    print(f"{'B H N D':<14}{'elements':>10}{'dQ':>10}{'dK':>10}{'dV':>10}")
    for shape, counts, elements in checks:
        print(f"{shape:<14}{elements:>10}" + "".join(f"{c:>10}" for c in counts))
    print()
    version, lines = triton_rows()
    which = f"triton {version}" if version else "triton"
    print(f"{which}: one fp32 product [1024, 64] x [64, 1024], error against float64 as above:")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
