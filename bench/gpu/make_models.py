#!/usr/bin/python3
"""bench/gpu_pipeline.sh's models, data and jobs: resnet50 at 224x224 and a GPT-2-small shaped
language model, scripted (TorchScript), with random data in the job's "tensors" format.

Usage: make_models.py --out DIR --model resnet50|gpt [--tiny]
Writes DIR/MODEL.pt, DIR/MODEL_train.pt and DIR/job.toml, and prints one line saying what.

resnet50: torchvision's resnet50(weights=None) (1000 classes) where torchvision is installed,
  else the same network defined here (bottleneck blocks [3, 4, 6, 3], the same parameter count).
  Batch 64 in 4 micro-batches, 128 images repeated over 15 epochs: 30 optimizer steps.
gpt: GPT-2 small's shape: 12 layers, d 768, 12 heads, MLP 3072, vocabulary 50257, context 256,
  learned positions, pre-LayerNorm, untied output head, no dropout (a pipeline does not draw a
  GPU's dropout as one process would; the work is the same). Loss on every position: the model
  returns logits as N x vocabulary x T for cross_entropy against N x T next tokens.
  Batch 16 in 4 micro-batches, 64 sequences over 6 epochs: 24 steps.
--tiny: the same code at sizes a 2-core CPU trains in seconds (resnet50 at 32x32, batch 8 in 2;
  gpt with d 64, 2 heads, 2 layers, vocabulary 512, context 32, batch 8 in 2), 2 steps each: to
  test the benchmark end to end without a GPU.
Adam, lr 1e-4, seed 0, schedule 1f1b. Runs with torch 1.13 (Debian) and 2.x.
"""

import argparse
import os
import sys

import torch
from torch import nn

sys.dont_write_bytecode = True


# --------------------------------------------------------------------------- resnet50 inline


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int, downsample: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride,
                                                   bias=False), nn.BatchNorm2d(planes * 4))
                           if downsample else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


class ResNet50(nn.Module):
    """torchvision's resnet50 without torchvision (same layers, same parameter count)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        layers = []
        inplanes = 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = [Bottleneck(inplanes, planes, stride, True)]
            inplanes = planes * 4
            stage += [Bottleneck(inplanes, planes, 1, False) for _ in range(blocks - 1)]
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int):
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None, num_classes=num_classes), "torchvision"
    except ImportError:
        return ResNet50(num_classes), "inline (no torchvision)"
    except TypeError:  # a torchvision older than the weights= argument
        import torchvision
        return torchvision.models.resnet50(pretrained=False, num_classes=num_classes), "torchvision"


# --------------------------------------------------------------------------- GPT


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, context: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(context, d) * 0.02)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x)).transpose(1, 2)  # N x vocab x T


# --------------------------------------------------------------------------- files


def job_text(batch: int, micro: int, epochs: int, train: str) -> str:
    return ("[train]\nepochs = %d\nbatch_size = %d\nmicro_batches = %d\nseed = 0\n"
            "schedule = \"1f1b\"\n\n[data]\nformat = \"tensors\"\ntrain = \"%s\"\n\n"
            "[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.0001\n"
            % (epochs, batch, micro, train))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True, choices=["resnet50", "gpt"])
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if args.model == "resnet50":
        size, classes, samples, batch, micro, epochs = ((32, 10, 16, 8, 2, 1) if args.tiny
                                                        else (224, 1000, 128, 64, 4, 15))
        model, origin = resnet50(classes)
        data = (torch.randn(samples, 3, size, size, generator=g),
                torch.randint(0, classes, (samples,), generator=g))
        what = "resnet50 (%s), %dx%d images, %d classes" % (origin, size, size, classes)
    else:
        vocab, d, heads, layers, context = ((512, 64, 2, 2, 32) if args.tiny
                                            else (50257, 768, 12, 12, 256))
        samples, batch, micro, epochs = (16, 8, 2, 1) if args.tiny else (64, 16, 4, 6)
        model = GPT(vocab, d, heads, layers, context)
        stream = torch.randint(0, vocab, (samples, context + 1), generator=g)
        data = (stream[:, :-1].contiguous(), stream[:, 1:].contiguous())
        what = "gpt: %d layers, d %d, %d heads, vocabulary %d, context %d" % (
            layers, d, heads, vocab, context)
    model.train()
    scripted = torch.jit.script(model)
    scripted.train()
    scripted.save(os.path.join(args.out, args.model + ".pt"))
    train = args.model + "_train.pt"
    torch.save(data, os.path.join(args.out, train))
    with open(os.path.join(args.out, "job.toml"), "w") as f:
        f.write(job_text(batch, micro, epochs, train))
    params = sum(p.numel() for p in model.parameters())
    steps = epochs * ((samples + batch - 1) // batch)
    print("%s; %.1fM parameters; batch %d in %d micro-batches, %d steps (torch %s)" % (
        what, params / 1e6, batch, micro, steps, torch.__version__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
