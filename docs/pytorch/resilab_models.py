"""PyTorch definitions of the networks resilab builds, with resilab's parameter names.

`model.state_dict()` of these modules has exactly the names and shapes of a resilab checkpoint
of the same configuration, so `resilab import` reads their weights without renames and
`model.load_state_dict(safetensors.torch.load_file(path), strict=True)` loads what
`resilab export` writes. See docs/pytorch.md.

    model = resnet(depth=20, width=1.0, channels=3, classes=10)   # [model] arch = "resnet", depth = 20
    model = vgg(depth=11, width=0.25, batch_norm=True)             # arch = "vgg", depth = 11, width = 0.25
    model = alexnet(width=0.5, batch_norm=False)                   # arch = "alexnet", width = 0.5
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


def scaled(c, width):
    """resilab's channel count for `c` at `width`: rounded half away from zero, at least 1."""
    return max(1, int(math.floor(c * width + 0.5)))


class ConvUnit(nn.Module):
    """Convolution ("same" padding), optional BatchNorm, ReLU and optional 2x2 max pooling."""

    def __init__(self, c_in, c_out, k, bias, batch_norm, pool):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=bias)
        self.bn = nn.BatchNorm2d(c_out) if batch_norm else None
        self.pool = pool

    def forward(self, x):
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        x = F.relu(x)
        return F.max_pool2d(x, 2) if self.pool else x


class Downsample(nn.Module):
    """The 1x1 strided convolution and BatchNorm of a shortcut that changes shape."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return self.bn(self.conv(x))


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = Downsample(c_in, c_out, stride) if stride != 1 or c_in != c_out else None

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + shortcut)


class PoolHead(nn.Module):
    """Global average pooling and one linear layer (ResNet and VGG)."""

    def __init__(self, c, classes):
        super().__init__()
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MlpHead(nn.Module):
    """Flatten and three linear layers with ReLU between them (AlexNet)."""

    def __init__(self, flat, h1, h2, classes):
        super().__init__()
        self.fc1 = nn.Linear(flat, h1)
        self.fc2 = nn.Linear(h1, h2)
        self.fc3 = nn.Linear(h2, classes)

    def forward(self, x):
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(F.relu(self.fc2(x)))


class ResNet(nn.Module):
    def __init__(self, depth=20, width=1.0, channels=3, classes=10):
        super().__init__()
        if depth in (18, 34):
            widths = [64, 128, 256, 512]
            counts = [2, 2, 2, 2] if depth == 18 else [3, 4, 6, 3]
        else:
            widths, counts = [16, 32, 64], [(depth - 2) // 6] * 3
        c = scaled(widths[0], width)
        self.stem = ConvUnit(channels, c, 3, bias=False, batch_norm=True, pool=False)
        for i, (w, n) in enumerate(zip(widths, counts)):
            blocks = []
            for b in range(n):
                out = scaled(w, width)
                blocks.append(BasicBlock(c, out, 2 if i > 0 and b == 0 else 1))
                c = out
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.layers = len(widths)
        self.classifier = PoolHead(c, classes)

    def forward(self, x):
        x = self.stem(x)
        for i in range(self.layers):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.classifier(x)


VGG = {11: [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0],
       16: [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]}


def resnet(depth=20, width=1.0, channels=3, classes=10):
    return ResNet(depth, width, channels, classes)


def vgg(depth=11, width=1.0, batch_norm=True, channels=3, size=32, classes=10):
    cfg, units, c, i = VGG[depth], [], channels, 0
    while i < len(cfg):
        out = scaled(cfg[i], width)
        pool = i + 1 < len(cfg) and cfg[i + 1] == 0 and size >= 2
        size = size // 2 if pool else size
        units.append(ConvUnit(c, out, 3, bias=True, batch_norm=batch_norm, pool=pool))
        c = out
        i += 2 if i + 1 < len(cfg) and cfg[i + 1] == 0 else 1
    model = nn.Sequential()
    model.features = nn.Sequential(*units)
    model.classifier = PoolHead(c, classes)
    return model


def alexnet(width=1.0, batch_norm=False, channels=3, size=32, classes=10):
    units, c = [], channels
    for w, k, pool in [(64, 5, True), (192, 5, True), (384, 3, False), (256, 3, False), (256, 3, True)]:
        out = scaled(w, width)
        units.append(ConvUnit(c, out, k, bias=True, batch_norm=batch_norm, pool=pool))
        size = size // 2 if pool else size
        c = out
    model = nn.Sequential()
    model.features = nn.Sequential(*units)
    model.classifier = MlpHead(c * size * size, scaled(1024, width), scaled(512, width), classes)
    return model
