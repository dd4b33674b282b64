"""End to end with PyTorch itself: a model trained in PyTorch, imported with `resilab import`,
gives the same test accuracy in `resilab eval`; its `resilab export` loads back into PyTorch
with strict=True and equal tensors. Run by scripts/pytorch-interop.sh (which provides PyTorch).

Steps:
  1. writes a small learnable dataset in CIFAR-10's binary format (class-specific smooth colour
     patterns plus noise; 5 x 400 training and 500 test images) under WORK/cifar;
  2. trains the ResNet-8 of docs/pytorch/resilab_models.py on it in PyTorch (SGD, momentum
     0.9, 3 epochs) with a fixed Normalize(mean, std), and saves a training checkpoint
     {epoch, model_state_dict, optimizer_state_dict};
  3. `resilab import --probe` (a probe of the trained model on 16 test images, saved with
     docs/pytorch/resilab_probe.py) with a configuration naming the same data and
     `data.normalize`, then `resilab eval --predictions`: every test image must get PyTorch's
     class (logits within 1e-4 of the largest), and the number classified correctly PyTorch's;
  4. `resilab export --optimizer`, then `load_state_dict(..., strict=True)` into a fresh model:
     every tensor and every momentum buffer must equal PyTorch's own, bit for bit;
  5. for every architecture of docs/pytorch/resilab_models.py (ResNet 8/20/18/34, VGG 11/16
     with and without BatchNorm, AlexNet with and without, several widths, 3x32x32 and 1x28x28
     images): its state_dict imports into the resilab model of the same configuration (every
     name and shape checked), and the export loads back with strict=True and equal tensors.
"""

import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "docs", "pytorch"))
import resilab_models as rm  # noqa: E402
from resilab_probe import save_probe  # noqa: E402

TRAIN_BATCH, TEST, CLASSES = 400, 500, 10


def images(n, generator, templates):
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    noise = torch.randn(n, 3, 32, 32, generator=generator)
    x = 128 + 30 * templates[labels] + 110 * noise
    return x.clamp(0, 255).round().to(torch.uint8), labels


def write_batch(path, x, labels):
    records = torch.cat([labels.to(torch.uint8)[:, None], x.reshape(len(x), -1)], dim=1)
    with open(path, "wb") as f:
        f.write(records.numpy().tobytes())


def make_dataset(root):
    g = torch.Generator().manual_seed(11)
    coarse = torch.randn(CLASSES, 3, 4, 4, generator=g)
    templates = F.interpolate(coarse, size=32, mode="bilinear", align_corners=False)
    os.makedirs(root, exist_ok=True)
    train = []
    for i in range(5):
        x, y = images(TRAIN_BATCH, g, templates)
        write_batch(os.path.join(root, f"data_batch_{i + 1}.bin"), x, y)
        train.append((x, y))
    test = images(TEST, g, templates)
    write_batch(os.path.join(root, "test_batch.bin"), *test)
    x = torch.cat([t[0] for t in train]), torch.cat([t[1] for t in train])
    return x, test


def normalise(x, mean, std):
    return (x.float() / 255 - torch.tensor(mean)[None, :, None, None]) / torch.tensor(std)[None, :, None, None]


def train(model, data, mean, std):
    torch.manual_seed(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = data
    for _ in range(3):
        model.train()
        for idx in torch.randperm(len(x)).split(64):
            opt.zero_grad()
            F.cross_entropy(model(normalise(x[idx], mean, std)), y[idx]).backward()
            opt.step()
    return opt


def correct(model, test, mean, std):
    model.eval()
    with torch.no_grad():
        return int((model(normalise(test[0], mean, std)).argmax(1) == test[1]).sum())


def same_predictions(model, test, mean, std, path):
    """resilab's `eval --predictions` against PyTorch, image by image: the same class for every
    test image, and logits within 1e-4 of the largest."""
    model.eval()
    with torch.no_grad():
        logits = model(normalise(test[0], mean, std))
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [list(map(float, line.split(","))) for line in f]
    assert header[:3] == ["image", "label", "predicted"] and len(rows) == len(test[1]), "predictions.csv has another shape"
    ours = torch.tensor([r[3:] for r in rows])
    worst = float((ours - logits).abs().max())
    scale = float(logits.abs().max())
    agree = sum(int(r[2]) == int(p) for r, p in zip(rows, logits.argmax(1)))
    print(f"predictions: {agree}/{len(rows)} test images get PyTorch's class; logits within {worst:.1e} (largest {scale:.2f})")
    assert agree == len(rows) and worst <= 1e-4 * scale, "resilab's predictions differ from PyTorch's"


def resilab(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"resilab {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--resilab", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)  # the models' initialisation
    data, test = make_dataset(os.path.join(a.work, "cifar"))
    pixels = data[0].float() / 255
    mean = [round(float(m), 4) for m in pixels.mean(dim=(0, 2, 3))]
    std = [round(float(s), 4) for s in pixels.std(dim=(0, 2, 3))]
    model = rm.resnet(depth=8)
    opt = train(model, data, mean, std)
    torch_correct = correct(model, test, mean, std)
    ckpt = os.path.join(a.work, "resnet8-train.pt")
    torch.save({"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict()}, ckpt)

    config = os.path.join(a.work, "run.toml")
    with open(config, "w") as f:
        f.write(f'[data]\nsource = "cifar10"\npath = "{os.path.join(a.work, "cifar")}"\n')
        f.write(f"normalize = {{ mean = {mean}, std = {std} }}\n")
        f.write('[model]\narch = "resnet"\ndepth = 8\n[optimizer]\nkind = "sgd"\nlr = 0.05\nmomentum = 0.9\n')
    # A probe of the trained model on 16 test images: the import verifies resilab's forward pass.
    probe = os.path.join(a.work, "probe.safetensors")
    save_probe(model, test[0][:16].float() / 255, probe, mean, std)
    imported = resilab(a.resilab, "import", ckpt, "--config", config, "--out", os.path.join(a.work, "ckpt"), "--probe", probe)
    print(imported, end="")
    assert "forward pass verified" in imported, "the import did not verify the probe"
    predictions = os.path.join(a.work, "predictions.csv")
    report = json.loads(resilab(a.resilab, "eval", os.path.join(a.work, "ckpt"), "--json", "--predictions", predictions))
    same_predictions(model, test, mean, std, predictions)
    resilab_correct = round(report["test_acc"] * report["test_images"])
    print(f"test accuracy: PyTorch {torch_correct}/{TEST}, resilab eval {resilab_correct}/{report['test_images']}")
    assert report["test_images"] == TEST and resilab_correct == torch_correct, "the imported model's accuracy differs"
    assert torch_correct > 2 * TEST // CLASSES, f"PyTorch learned too little ({torch_correct}/{TEST}) for the check to mean much"

    exported = os.path.join(a.work, "resnet8.safetensors")
    print(resilab(a.resilab, "export", os.path.join(a.work, "ckpt"), "--out", exported, "--optimizer"), end="")
    tensors = load_file(exported)
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    fresh = rm.resnet(depth=8)
    fresh.load_state_dict(weights, strict=True)
    own = model.state_dict()
    for name, value in fresh.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            assert torch.equal(value, own[name]), f"{name} differs after export"
    state = opt.state_dict()["state"]
    for i, s in state.items():
        assert torch.equal(tensors[f"optimizer.state.{i}.momentum_buffer"], s["momentum_buffer"]), f"momentum {i} differs"
    assert correct(fresh, test, mean, std) == torch_correct
    print(f"export: {len(weights)} tensors load with strict=True and equal PyTorch's; {len(state)} momentum buffers equal")
    every_architecture(a.resilab, a.work)


ARCHITECTURES = [
    ("resnet", {"depth": 8, "width": 0.5}, 3, 32),
    ("resnet", {"depth": 20, "width": 0.25}, 1, 28),
    ("resnet", {"depth": 18, "width": 0.125}, 3, 32),
    ("resnet", {"depth": 34, "width": 0.125}, 3, 32),
    ("vgg", {"depth": 11, "width": 0.25, "batch_norm": False}, 3, 32),
    ("vgg", {"depth": 16, "width": 0.125, "batch_norm": True}, 1, 28),
    ("alexnet", {"width": 0.25, "batch_norm": False}, 3, 32),
    ("alexnet", {"width": 0.125, "batch_norm": True}, 1, 28),
]


def every_architecture(binary, work):
    for arch, kw, channels, size in ARCHITECTURES:
        if arch == "resnet":
            model = rm.resnet(channels=channels, **kw)
        else:
            model = getattr(rm, arch)(channels=channels, size=size, **kw)
        name = f"{arch}-{'-'.join(f'{k}{v}' for k, v in kw.items())}-{channels}x{size}"
        weights = os.path.join(work, f"{name}.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
        config = os.path.join(work, f"{name}.toml")
        with open(config, "w") as f:
            f.write(f'[data]\nchannels = {channels}\nimage_size = {size}\ntrain_size = 16\ntest_size = 16\nnormalize = "dataset"\n')
            f.write(f'[train]\nbatch_size = 8\n[model]\narch = "{arch}"\n')
            f.write("".join(f"{k} = {str(v).lower()}\n" for k, v in kw.items()))
        resilab(binary, "import", weights, "--config", config, "--out", os.path.join(work, name))
        back = os.path.join(work, f"{name}-export.safetensors")
        resilab(binary, "export", os.path.join(work, name), "--out", back)
        fresh = rm.resnet(channels=channels, **kw) if arch == "resnet" else getattr(rm, arch)(channels=channels, size=size, **kw)
        fresh.load_state_dict(load_file(back), strict=True)
        own = model.state_dict()
        for key, value in fresh.state_dict().items():
            if not key.endswith("num_batches_tracked"):
                assert torch.equal(value, own[key]), f"{name}: {key} differs after import and export"
        print(f"{name}: {len(own)} tensors import, export and load with strict=True")


if __name__ == "__main__":
    main()
