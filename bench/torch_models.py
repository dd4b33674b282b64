"""PyTorch mirrors of resilab's models, for the CPU throughput baseline.

Each definition matches resilab's Burn model layer for layer (same shapes, same
parameter count), so the two frameworks do the same arithmetic per step.
Entry point: ``build(arch, depth, width, batch_norm, ...)``.
"""

import math

import torch.nn as nn


def scaled(channels, width):
    """Channel count scaled by ``width``, rounded half away from zero (like Rust's
    ``f64::round``, unlike Python's banker's ``round``) and at least 1."""
    return max(1, int(math.floor(channels * width + 0.5)))


def _norm(channels, batch_norm):
    return nn.BatchNorm2d(channels) if batch_norm else nn.Identity()


# --------------------------------------------------------------------- ResNet


class BasicBlock(nn.Module):
    """conv3x3(s) - BN - ReLU - conv3x3 - BN, plus shortcut, then ReLU."""

    def __init__(self, cin, cout, stride, batch_norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = _norm(cout, batch_norm)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = _norm(cout, batch_norm)
        self.relu = nn.ReLU()
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            # Projection shortcut: conv1x1(stride s, no bias) + BN.
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, 0, bias=False), _norm(cout, batch_norm)
            )

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """Stem conv3x3 (stride 1, no max pool), stages of BasicBlocks where every
    stage but the first starts with stride 2, global average pool, Linear."""

    def __init__(self, blocks, widths, in_channels, num_classes, batch_norm):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
            _norm(widths[0], batch_norm),
            nn.ReLU(),
        )
        layers, cin = [], widths[0]
        for i, (n, cout) in enumerate(zip(blocks, widths)):
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                layers.append(BasicBlock(cin, cout, stride, batch_norm))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.pool(self.layers(self.stem(x)))
        return self.fc(x.flatten(1))


def resnet(depth, width, batch_norm, in_channels, num_classes):
    if depth in (18, 34):
        # ImageNet-style stages, adapted to small images (3x3 stem, no max pool).
        blocks = [2, 2, 2, 2] if depth == 18 else [3, 4, 6, 3]
        base = [64, 128, 256, 512]
    elif depth >= 8 and (depth - 2) % 6 == 0:
        # CIFAR-style: three stages of n blocks, depth = 6n + 2.
        blocks = [(depth - 2) // 6] * 3
        base = [16, 32, 64]
    else:
        raise ValueError(f"unsupported resnet depth {depth} (6n+2, 18 or 34)")
    widths = [scaled(c, width) for c in base]
    return ResNet(blocks, widths, in_channels, num_classes, batch_norm)


# ------------------------------------------------------------------------ VGG

VGG_CFG = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
         512, 512, 512, "M", 512, 512, 512, "M"],
}


def vgg(depth, width, batch_norm, in_channels, image_size, num_classes):
    if depth not in VGG_CFG:
        raise ValueError(f"unsupported vgg depth {depth} (11 or 16)")
    layers, cin, size = [], in_channels, image_size
    for item in VGG_CFG[depth]:
        if item == "M":
            if size >= 2:  # pool only while there is something left to halve
                layers.append(nn.MaxPool2d(2, 2))
                size //= 2
            continue
        cout = scaled(item, width)
        layers.append(nn.Conv2d(cin, cout, 3, 1, 1, bias=True))
        if batch_norm:
            layers.append(nn.BatchNorm2d(cout))
        layers.append(nn.ReLU())
        cin = cout
    # No dropout; the classifier is a single Linear.
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


# -------------------------------------------------------------------- AlexNet


def alexnet(width, in_channels, image_size, num_classes):
    c = [scaled(n, width) for n in (64, 192, 384, 256, 256, 1024, 512)]
    size = image_size // 2 // 2 // 2  # three 2x2/2 pools, floor; convs keep size
    return nn.Sequential(
        nn.Conv2d(in_channels, c[0], 5, 1, 2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(c[0], c[1], 5, 1, 2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(c[1], c[2], 3, 1, 1), nn.ReLU(),
        nn.Conv2d(c[2], c[3], 3, 1, 1), nn.ReLU(),
        nn.Conv2d(c[3], c[4], 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(c[4] * size * size, c[5]), nn.ReLU(),
        nn.Linear(c[5], c[6]), nn.ReLU(),
        nn.Linear(c[6], num_classes),
    )


# ---------------------------------------------------------------------- entry


def build(arch, depth, width, batch_norm, in_channels=3, image_size=32, num_classes=10):
    """Build a model by resilab's (arch, depth, width, batch_norm) description.

    ``batch_norm`` is honoured by every arch that has norms (resnet: BN becomes
    identity when off; vgg: BN inserted after each conv when on); alexnet has none.
    """
    if arch == "resnet":
        return resnet(depth, width, batch_norm, in_channels, num_classes)
    if arch == "vgg":
        return vgg(depth, width, batch_norm, in_channels, image_size, num_classes)
    if arch == "alexnet":
        return alexnet(width, in_channels, image_size, num_classes)
    raise ValueError(f"unknown arch {arch!r} (resnet, vgg, alexnet)")


def count_params(model):
    """Trainable parameters (BN running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


if __name__ == "__main__":
    # Sanity print: compare with resilab's parameter counts.
    for spec in [("alexnet", 0, 1.0, False), ("alexnet", 0, 0.5, False),
                 ("vgg", 11, 1.0, True), ("vgg", 11, 0.25, True),
                 ("vgg", 16, 1.0, True), ("resnet", 8, 1.0, True),
                 ("resnet", 20, 1.0, True), ("resnet", 56, 1.0, True),
                 ("resnet", 18, 0.25, True), ("resnet", 18, 1.0, True),
                 ("resnet", 34, 1.0, True)]:
        arch, depth, width, bn = spec
        print(f"{arch:8s} depth={depth:<3d} width={width:<5g} bn={int(bn)} "
              f"params={count_params(build(*spec)):,}")


def add_step_args(p, warmup, steps):
    """The model and step options of bench/torch_step.py and bench/breakdown_torch.py (an
    argparse parser), with those scripts' own warmup and step counts as defaults."""
    import argparse

    p.add_argument("--arch", required=True, choices=["resnet", "vgg", "alexnet"])
    p.add_argument("--depth", type=int, default=0)
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--batch-norm", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--steps", type=int, default=steps)


def timed_steps(step, warmup, steps):
    """Runs `step()` `warmup` times untimed, then `steps` times; the timed runs' seconds."""
    import time

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times
