"""PyTorch's training step broken down by operation (CPU); prints one JSON line.

The step is torch_step.py's: the model of torch_models.build, forward, cross-entropy loss,
backward, SGD (momentum 0.9) update, zero_grad, on one fixed random batch. After ``--warmup``
steps, ``--steps`` steps are timed without the profiler (the median is the step time), then
``--steps`` more run under ``torch.profiler`` (CPU activity). Every profiler event's self
CPU time goes to the category of the innermost event, itself or an enclosing one, that a
rule of TORCH_RULES matches (so ``aten::empty`` inside ``aten::mkldnn_convolution`` is conv
forward, ``aten::add_`` inside ``Optimizer.step`` is optimizer); the categories' sum over the
profiled steps, divided by the steps, is scaled to the unprofiled median step time (the
profiler adds overhead, and Python's time between ops is in no event).

breakdown.py turns the line into CSV rows.
"""

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from torch_models import add_step_args, build, timed_steps

# (category, regex on the event name); the innermost matching event decides. The autograd
# engine's "evaluate_function: X" wrappers match nothing on purpose: what they do themselves
# (summing the gradients of a tensor used twice, ResNet's shortcuts) is "other", as in resilab.
TORCH_RULES = [
    # PyTorch's CPU convolution backward computes the input and weight (and bias) gradients
    # in one op; if a build splits them into ops of their own, those count separately.
    ("conv backward-data", r"convolution_backward_input|conv2d_backward_input"),
    ("conv backward-weight", r"convolution_backward_weight|conv2d_backward_weight"),
    ("conv backward (data+weight)",
     r"^aten::convolution_backward$|^ConvolutionBackward\d|^aten::\w*conv\w*_backward$"),
    ("conv forward", r"^aten::(conv2d|convolution|_convolution|mkldnn_convolution|_slow_conv2d_forward"
                     r"|thnn_conv2d|_nnpack_spatial_convolution)$"),
    ("bn backward", r"batch_norm\w*_backward|BatchNormBackward"),
    ("bn forward", r"^aten::\w*batch_norm\w*$"),
    ("relu backward", r"^aten::threshold_backward$|^ReluBackward"),
    ("relu forward", r"^aten::(relu|relu_|clamp_min|clamp_min_|threshold|threshold_)$"),
    ("pool backward", r"max_pool2d_with_indices_backward|MaxPool2DWithIndicesBackward"
                      r"|adaptive_avg_pool2d_backward|AdaptiveAvgPool2DBackward|^MeanBackward"),
    ("pool forward", r"^aten::(max_pool2d|max_pool2d_with_indices|adaptive_avg_pool2d|_adaptive_avg_pool2d)$"),
    # The bias gradient (a sum) runs in the engine's wrapper of the node, not in the node.
    ("linear backward", r"^(AddmmBackward|MmBackward|TBackward)\d"
                        r"|^autograd::engine::evaluate_function: (AddmmBackward|MmBackward|TBackward)\d"),
    ("linear forward", r"^aten::(linear|addmm)$"),
    ("loss", r"cross_entropy|log_softmax|nll_loss|LogSoftmaxBackward|NllLossBackward"),
    ("optimizer", r"^Optimizer\.(step|zero_grad)"),
]
TORCH_RULES = [(c, re.compile(p)) for c, p in TORCH_RULES]


def category(event):
    """The category of an event's self time: its own, or its innermost ancestor's."""
    e = event
    while e is not None:
        for cat, rx in TORCH_RULES:
            if rx.search(e.name):
                return cat
        e = e.cpu_parent
    return "other"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="the label of the CSV (breakdown.py label)")
    add_step_args(p, warmup=5, steps=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--explain", type=int, default=0, help="print the N largest 'other' events to stderr")
    a = p.parse_args()

    # As torch_step.py: thread settings before any parallel work, one inter-op thread.
    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build(a.arch, a.depth, a.width, a.batch_norm, in_channels=3, image_size=32, num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))

    def step():  # torch_step.py's step
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    times = timed_steps(step, a.warmup, a.steps)
    step_ms = statistics.median(times) * 1e3

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        profiled_ms = (time.perf_counter() - t0) * 1e3 / a.steps

    us, other = Counter(), Counter()
    for e in prof.events():
        cat = category(e)
        us[cat] += e.self_cpu_time_total
        if cat == "other":
            other[e.name + (f" <- {e.cpu_parent.name}" if e.cpu_parent is not None else "")] += e.self_cpu_time_total
    if a.explain:
        for name, t in other.most_common(a.explain):
            print(f"{t / 1e3 / a.steps:8.3f} ms/step  {name}", file=sys.stderr)
    total = sum(us.values())
    raw = {c: t / 1e3 / a.steps for c, t in us.items()}
    print(json.dumps({
        "impl": "pytorch", "model": a.model, "threads": a.threads, "step_ms": step_ms,
        "categories": {c: step_ms * t / total for c, t in us.most_common()},
        "shares": {c: t / total for c, t in us.most_common()},
        "profiled_ops_ms_per_step": raw, "profiled_step_ms": profiled_ms,
        "torch_version": torch.__version__,
    }))


if __name__ == "__main__":
    main()
