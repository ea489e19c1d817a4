#!/usr/bin/python3
"""bench/wan's second model: torchvision's resnet18 (10 classes) for 32x32 images, scripted, and
synthetic CIFAR-sized data it can learn (each class a colour and a stripe orientation, with noise),
as the job's "tensors" format.

Usage: make_resnet.py --out DIR [--train N] [--val N]
Writes DIR/resnet18.pt, DIR/images_train.pt, DIR/images_val.pt.
"""

import argparse
import os

import torch
import torchvision


def images(count, generator):
    labels = torch.randint(0, 10, (count,), generator=generator)
    # The classes' colours are the same in every split.
    colour = torch.rand(10, 3, 1, 1, generator=torch.Generator().manual_seed(1234))
    base = colour[labels].expand(count, 3, 32, 32).clone()
    stripes = torch.arange(32).float()
    for i in range(count):
        c = int(labels[i])
        pattern = torch.sin(stripes * (1 + c % 5) / 3)
        base[i] += 0.3 * (pattern.view(1, 1, 32) if c < 5 else pattern.view(1, 32, 1))
    base += 0.2 * torch.randn(base.shape, generator=generator)
    return base, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=640)
    ap.add_argument("--val", type=int, default=160)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    torch.jit.script(model).save(os.path.join(args.out, "resnet18.pt"))
    torch.save(images(args.train, g), os.path.join(args.out, "images_train.pt"))
    torch.save(images(args.val, g), os.path.join(args.out, "images_val.pt"))


if __name__ == "__main__":
    main()
