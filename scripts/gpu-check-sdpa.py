#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention timed on the GPU, for scripts/gpu-check: forward and
backward TFLOP/s at the shapes given, with the FLOP convention of docs/algorithms.md §1.3
(forward 4 * live pairs * heads * head_dim, backward 2.5x). Prints one JSON object per shape."""
import argparse
import json
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seq", type=int, nargs="+", default=[8192])
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--mask", choices=["causal", "full"], default="causal")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(json.dumps({"error": f"PyTorch is not importable: {e}"}))
        return 2
    if not torch.cuda.is_available():
        print(json.dumps({"error": "PyTorch sees no CUDA device"}))
        return 2
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    causal = a.mask == "causal"
    for n in a.seq:
        shape = (1, a.heads, n, a.head_dim)
        q, k, v = (torch.rand(shape, device="cuda", dtype=dtype, requires_grad=True) * 2 - 1 for _ in range(3))
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        do = torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1

        def timed(fn):
            fn()
            torch.cuda.synchronize()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(a.reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            return begin.elapsed_time(end) / a.reps

        fwd_ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        bwd_ms = timed(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
        pairs = n * (n + 1) / 2 if causal else n * n
        flops = 4 * pairs * a.heads * a.head_dim
        print(json.dumps({"seq": n, "heads": a.heads, "head_dim": a.head_dim, "dtype": a.dtype, "mask": a.mask,
                          "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                          "forward_ms": fwd_ms, "backward_ms": bwd_ms,
                          "forward_tflops": flops / (fwd_ms * 1e-3) * 1e-12,
                          "backward_tflops": 2.5 * flops / (bwd_ms * 1e-3) * 1e-12}), flush=True)
        del q, k, v, do, out
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
