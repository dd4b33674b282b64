"""Per-layer PyTorch CPU convolution timings: forward, input gradient and weight gradient.

Times, for each shape given as ``ci,co,k,hw`` (batch ``--batch``, "same" padding, stride 1),
``F.conv2d`` and the two halves of ``aten.convolution_backward`` (the kernels autograd calls),
each as the mean of ``--reps`` calls after one warm-up, and prints one CSV line per shape:
``shape,torch_forward_ms,torch_input_grad_ms,torch_weight_grad_ms``.
"""

import argparse
import time

import torch
import torch.nn.functional as F


def mean_ms(f, reps):
    f()
    start = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - start) * 1e3 / reps


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("shapes", nargs="+", help="ci,co,k,hw per shape")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print("shape,torch_forward_ms,torch_input_grad_ms,torch_weight_grad_ms")
    with torch.no_grad():
        for spec in a.shapes:
            ci, co, k, hw = (int(v) for v in spec.split(","))
            x = torch.rand(a.batch, ci, hw, hw)
            w = torch.rand(co, ci, k, k)
            b = torch.rand(co)
            dy = torch.rand(a.batch, co, hw, hw)
            pad = k // 2

            def backward(mask):
                return torch.ops.aten.convolution_backward(
                    dy, x, w, [co], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, mask)

            fwd = mean_ms(lambda: F.conv2d(x, w, b, padding=pad), a.reps)
            dx = mean_ms(lambda: backward([True, False, False]), a.reps)
            dw = mean_ms(lambda: backward([False, True, False]), a.reps)
            print(f"{ci}->{co} k{k} {hw}x{hw},{fwd:.3f},{dx:.3f},{dw:.3f}", flush=True)


if __name__ == "__main__":
    main()
