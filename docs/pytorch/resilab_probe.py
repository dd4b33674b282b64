"""A probe of a PyTorch model, so that `resilab import --probe` can check resilab computes what
the module computes (docs/pytorch.md):

    from resilab_probe import save_probe
    save_probe(model, images, "probe.safetensors", mean=[0.4914, 0.4822, 0.4465], std=[0.2470, 0.2435, 0.2616])
    # resilab import weights.pt --config run.toml --out imported --probe probe.safetensors

`images` is a batch as the dataset gives it before normalisation: shape [N, C, H, W], pixels
scaled to [0, 1] (torchvision's `ToTensor()` output), e.g. 16 test images. `mean` and `std` are
the normalisation the model was trained with (torchvision's `Normalize(mean, std)`). The probe
holds the images, the logits the model gives for them in eval mode after that normalisation,
and the mean and std. resilab normalises the images with its configuration's `data.normalize`
and runs its own forward pass, so a different forward pass (a stride in another place, a
max-pool, another stem) and a different normalisation both show.
"""

import json

import torch
from safetensors.torch import save_file

FORMAT = "resilab-probe-1"


def save_probe(model, images, path, mean, std):
    """Writes `images`, `model`'s eval-mode logits on them (normalised with `mean` and `std`)
    and the normalisation to `path` (safetensors). The model's mode is restored after."""
    images = images.detach().to(torch.float32).cpu().contiguous()
    if images.dim() != 4:
        raise ValueError(f"images must be [N, C, H, W], not {list(images.shape)}")
    channels = images.shape[1]
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"mean and std need one value per channel ({channels})")
    if images.min() < 0 or images.max() > 1:
        raise ValueError("images must hold pixels scaled to [0, 1], before normalisation")
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    device = next(model.parameters()).device
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(((images - m) / s).to(device)).detach().to(torch.float32).cpu().contiguous()
    finally:
        model.train(training)
    metadata = {"format": FORMAT, "mean": json.dumps([float(v) for v in mean]), "std": json.dumps([float(v) for v in std])}
    save_file({"images": images, "logits": logits}, path, metadata=metadata)
