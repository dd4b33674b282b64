"""Makes the PyTorch fixtures of resilab's import and export tests (tests/fixtures/pytorch/).

    bash scripts/with-tch.sh python scripts/pytorch_fixtures.py   # PyTorch from the tch venv

Writes, with fixed seeds:
  resnet8.pt           a ResNet-8's state_dict (torch.save), BatchNorm statistics and affine
                       parameters moved away from their initial values
  vgg11-w0.125.safetensors   a VGG-11 at width 1/8 with BatchNorm, the same way
  resnet8-train.pt     a training checkpoint of the ResNet-8 as DistributedDataParallel saves
                       it ("module." names): {"epoch", "model_state_dict",
                       "optimizer_state_dict"} after three SGD steps (momentum 0.9)
  logits.safetensors   a fixed input batch and each model's eval-mode logits on it
  code.pt              a pickle that would run code when unpickled (os.system), which resilab
                       must refuse without running it
  resnet8-probe.safetensors  a probe of resnet8.pt (docs/pytorch/resilab_probe.py): 8 images in
                       [0, 1], CIFAR-10's normalisation, the model's logits
  resnet8-stride.pt    a ResNet-8 with the same names and shapes whose downsampling blocks put
                       the stride on their second convolution, not the first; and
  resnet8-stride-probe.safetensors  its probe
  resnet8-reordered-train.pt  a training checkpoint (three SGD steps, momentum 0.9) of a ResNet-8
                       whose first block registers conv2 and bn2 before conv1 and bn1 (same
                       shapes), so its optimizer numbers their state in another order; and
  resnet8-reordered-momentum.safetensors  its momentum buffers by parameter name
"""

import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "docs", "pytorch"))
import resilab_models as rm  # noqa: E402
from resilab_probe import save_probe  # noqa: E402

CIFAR_MEAN, CIFAR_STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "pytorch")


def settle(model, seed):
    """Random affine BatchNorm parameters and running statistics from a few training batches."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        model.train()
        for _ in range(3):
            model(torch.randn(16, 3, 32, 32, generator=g))
    model.eval()
    return model


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo resilab-fixture-ran-code > /tmp/resilab-fixture-ran-code",))


def reordered(out):
    """A training checkpoint whose optimizer state is numbered in another order than resilab's
    module order, with equal shapes where the orders differ, and the truth by name."""
    from collections import OrderedDict

    model = settle(rm.resnet(depth=8), 8)
    block = model.layer1[0]
    block._modules = OrderedDict((k, block._modules[k]) for k in ["conv2", "bn2", "conv1", "bn1"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(9)
    model.train()
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(8, 3, 32, 32, generator=g)), torch.randint(0, 10, (8,), generator=g)).backward()
        opt.step()
    torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict()}, os.path.join(out, "resnet8-reordered-train.pt"))
    momentum = {n: opt.state[p]["momentum_buffer"].contiguous() for n, p in model.named_parameters()}
    save_file(momentum, os.path.join(out, "resnet8-reordered-momentum.safetensors"))


def stride_second(model):
    """The same model with each downsampling block's stride moved from conv1 to conv2 (a common
    variant): every name and shape stays, the forward pass changes."""
    for block in [b for layer in (model.layer2, model.layer3) for b in layer if b.downsample is not None]:
        block.conv1.stride, block.conv2.stride = (1, 1), (2, 2)
    return model


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    resnet = settle(rm.resnet(depth=8), 1)
    vgg = settle(rm.vgg(depth=11, width=0.125, batch_norm=True), 2)
    torch.save(resnet.state_dict(), os.path.join(OUT, "resnet8.pt"))
    save_file({k: v.contiguous() for k, v in vgg.state_dict().items()}, os.path.join(OUT, "vgg11-w0.125.safetensors"))

    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        save_file({"input": x, "resnet8": resnet(x), "vgg11-w0.125": vgg(x)}, os.path.join(OUT, "logits.safetensors"))

    trained = settle(rm.resnet(depth=8), 1)
    trained.load_state_dict(resnet.state_dict())
    opt = torch.optim.SGD(trained.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(4)
    trained.train()
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(trained(torch.randn(8, 3, 32, 32, generator=g)), torch.randint(0, 10, (8,), generator=g))
        loss.backward()
        opt.step()
    checkpoint = {
        "epoch": 3,
        "model_state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()},
        "optimizer_state_dict": opt.state_dict(),
    }
    torch.save(checkpoint, os.path.join(OUT, "resnet8-train.pt"))

    torch.save({"weight": torch.ones(2), "payload": RunsCode()}, os.path.join(OUT, "code.pt"))

    images = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(6))
    save_probe(resnet, images, os.path.join(OUT, "resnet8-probe.safetensors"), CIFAR_MEAN, CIFAR_STD)
    strided = settle(stride_second(rm.resnet(depth=8)), 7)
    torch.save(strided.state_dict(), os.path.join(OUT, "resnet8-stride.pt"))
    save_probe(strided, images, os.path.join(OUT, "resnet8-stride-probe.safetensors"), CIFAR_MEAN, CIFAR_STD)
    reordered(OUT)
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
