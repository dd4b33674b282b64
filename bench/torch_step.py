"""Time one full PyTorch training step (CPU, or a GPU with --device) and print a single JSON line.

A step is: forward, cross-entropy loss, backward, SGD (momentum 0.9) update,
zero_grad, on one fixed random batch of images and labels (so data generation
is not timed). Reports the median step time over ``--steps`` timed steps.
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from torch_models import add_step_args, build, timed_steps, count_params


def main():
    p = argparse.ArgumentParser(description=__doc__)
    add_step_args(p, warmup=3, steps=20)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu",
                   help="cpu, cuda or mps; 'auto' picks cuda, then mps, then cpu")
    a = p.parse_args()

    # Thread settings must come before any parallel work in this process.
    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    device = a.device
    if device == "auto":
        if torch.cuda.is_available():
            device = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    model = build(a.arch, a.depth, a.width, a.batch_norm,
                  in_channels=3, image_size=a.image_size, num_classes=a.classes).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size).to(device)
    y = torch.randint(0, a.classes, (a.batch,)).to(device)

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()  # forces completion, like reading the loss back

    times = timed_steps(step, a.warmup, a.steps)

    median = statistics.median(times)
    print(json.dumps({
        "impl": "pytorch",
        "arch": a.arch,
        "depth": a.depth,
        "width": a.width,
        "params": count_params(model),
        "batch": a.batch,
        "threads": a.threads,
        "images_per_s": a.batch / median,
        "step_ms_median": median * 1e3,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else device,
    }))


if __name__ == "__main__":
    main()
