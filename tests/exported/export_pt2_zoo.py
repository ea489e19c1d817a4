"""Exports the zoo of models that test_exported runs through libs/exported, with what eager
PyTorch computes for each, so the C++ test compares against PyTorch itself.

Usage: export_pt2_zoo.py --out DIR      (torch >= 2.10: the environment of scripts/venv)

For each model NAME it writes:
  DIR/NAME.pt2       torch.export.export(model.train(), example, dynamic_shapes=batch Dim) saved
                     with torch.export.save (example batch kExampleBatch)
  DIR/NAME.ref.pt    torch.save'd dict, computed by one eager process on one thread from the state
                     the archive holds, on a batch of kRunBatch (not the example's):
                       inputs        list of input tensors
                       grad_outputs  list, one a (floating) output: the gradient backward starts from
                       seed          torch.manual_seed before the training forward (dropout's draws)
                       outputs       the outputs of one forward in train mode
                       grads         {parameter name: its gradient} after backward(outputs, grad_outputs)
                       buffers       {buffer name: its value} after that forward
                       eval_outputs  then model.eval(): the outputs of one forward on the same inputs
And DIR/sym_int.pt2 (SymIntIo: an int input and an int output), without a reference.
The .ref.pt is written last (a model counts as exported when it exists and is newer than this
script).
"""

import argparse
import os
import sys

import torch
from torch import nn
import torch.nn.functional as F

kExampleBatch = 4
kRunBatch = 6
kSeed = 123


class Cnn(nn.Module):
    """The digits CNN's shape with BatchNorm and in-place ReLUs (nn.ReLU(inplace) and relu_)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.act = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        y = F.max_pool2d(y, 2)
        y = torch.relu_(self.bn2(self.conv2(y)))
        y = F.max_pool2d(y, 2)
        return self.fc(y.flatten(1))


class Encoder(nn.Module):
    """A transformer encoder layer (its attention through scaled_dot_product_attention)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                                dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.layer(x).mean(dim=1))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True)
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out[:, -1]) + c[-1].sum(dim=1, keepdim=True)


class MultiIo(nn.Module):
    """Two inputs, three outputs (one of them an integer tensor without a gradient)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(3, 4)

    def forward(self, x, y):
        h = torch.tanh(self.a(x) + self.b(y))
        return h, h.sum(dim=1) * x[:, 0], h.argmax(dim=1)


class MutatedBuffer(nn.Module):
    """A buffer updated in place by every training forward (a running mean of the input)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 2)
        self.register_buffer("ema", torch.zeros(5))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.ema.mul_(0.9).add_(x.detach().mean(dim=0), alpha=0.1)
        self.steps.add_(1)
        return self.fc(x - self.ema)


class Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(20, 4)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class Tied(nn.Module):
    """Embedding and output projection sharing one weight."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.mix = nn.Linear(6, 6)
        self.out = nn.Linear(6, 11, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):
        return self.out(torch.tanh(self.mix(self.emb(tokens))))


class Constants(nn.Module):
    """A non-persistent buffer and a tensor constant (both in the archive's data/constants/)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0), persistent=False)
        self.offset = torch.tensor([0.5, -0.5, 1.0, 0.0])

    def forward(self, x):
        return self.fc(x) * self.scale + self.offset


class Gpt(nn.Module):
    """A GPT-2-shaped block: token and position embeddings (arange with device and dtype as
    keyword arguments), causal attention through F.scaled_dot_product_attention with dropout in
    training only, GELU, LayerNorm, and an output head tied to the token embedding."""

    def __init__(self, vocab=13, dim=16, heads=2, context=8):
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * dim, dim), nn.Dropout(0.1))
        self.norm3 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, idx):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        q, k, v = self.qkv(self.norm1(x)).split(x.size(-1), dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=0.1 if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, -1))
        x = x + self.mlp(self.norm2(x))
        return self.head(self.norm3(x))


class ResNet18(nn.Module):
    """torchvision's resnet18 (weights=None) at 32x32 with 10 classes."""

    def __init__(self):
        super().__init__()
        import torchvision
        self.net = torchvision.models.resnet18(weights=None, num_classes=10)

    def forward(self, x):
        return self.net(x)


def inputs_of(name, batch, generator):
    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    return {
        "cnn": lambda: (randn(batch, 1, 16, 16),),
        "encoder": lambda: (randn(batch, 7, 16),),
        "lstm": lambda: (randn(batch, 5, 8),),
        "multi_io": lambda: (randn(batch, 6), randn(batch, 3)),
        "mutated_buffer": lambda: (randn(batch, 5),),
        "dropout": lambda: (randn(batch, 10),),
        "tied": lambda: (torch.randint(0, 11, (batch, 9), generator=generator),),
        "constants": lambda: (randn(batch, 4),),
        "gpt": lambda: (torch.randint(0, 13, (batch, 8), generator=generator),),
        "resnet18": lambda: (randn(batch, 3, 32, 32),),
    }[name]()


MODELS = {"cnn": Cnn, "encoder": Encoder, "lstm": Lstm, "multi_io": MultiIo,
          "mutated_buffer": MutatedBuffer, "dropout": Dropout, "tied": Tied,
          "constants": Constants, "gpt": Gpt, "resnet18": ResNet18}


def export_one(name, out_dir):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    generator = torch.Generator().manual_seed(1)
    example = inputs_of(name, kExampleBatch, generator)
    batch = torch.export.Dim("batch", min=2, max=4096)
    dynamic = tuple({0: batch} for _ in example)
    program = torch.export.export(model, example, dynamic_shapes=dynamic)
    pt2 = os.path.join(out_dir, name + ".pt2")
    # Written beside, then moved: the archive's root folder is named after the file it is saved as.
    scratch = os.path.join(out_dir, ".writing")
    os.makedirs(scratch, exist_ok=True)
    torch.export.save(program, os.path.join(scratch, name + ".pt2"))
    os.replace(os.path.join(scratch, name + ".pt2"), pt2)

    # The eager reference starts from what the archive holds (export does not run the model on
    # real tensors, but loading it back makes that a fact rather than an assumption).
    state = torch.export.load(pt2).state_dict
    model.load_state_dict(dict(state.items()), strict=False)
    inputs = inputs_of(name, kRunBatch, generator)
    torch.manual_seed(kSeed)
    outputs = model(*inputs)
    outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
    grad_outputs = [torch.randn(o.shape, generator=generator) if o.is_floating_point() else None
                    for o in outputs]
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if g is not None]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.eval()
    eval_outputs = model(*inputs)
    eval_outputs = list(eval_outputs) if isinstance(eval_outputs, tuple) else [eval_outputs]
    ref = {
        "inputs": list(inputs),
        "grad_outputs": [g if g is not None else torch.zeros(0) for g in grad_outputs],
        "seed": kSeed,
        "outputs": [o.detach() for o in outputs],
        "grads": grads,
        "buffers": buffers,
        "eval_outputs": [o.detach() for o in eval_outputs],
    }
    path = os.path.join(out_dir, name + ".ref.pt")
    torch.save(ref, path + ".tmp")
    os.replace(path + ".tmp", path)


class SymIntIo(nn.Module):
    """A stage cut from a larger graph: the batch size computed upstream comes in as an int (a
    SymInt placeholder) and a size goes out as one. No reference file: the C++ test computes it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x, b: int):
        return self.fc(x).reshape(b, 2, 2), b * 3


def export_sym_int(out_dir):
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=2, max=4096)
    program = torch.export.export(SymIntIo(), (torch.randn(kExampleBatch, 6), kExampleBatch),
                                  dynamic_shapes=({0: batch}, torch.export.Dim.DYNAMIC))
    scratch = os.path.join(out_dir, ".writing")
    os.makedirs(scratch, exist_ok=True)
    torch.export.save(program, os.path.join(scratch, "sym_int.pt2"))
    os.replace(os.path.join(scratch, "sym_int.pt2"), os.path.join(out_dir, "sym_int.pt2"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    names = args.only.split(",") if args.only else list(MODELS)
    script_time = os.path.getmtime(os.path.abspath(__file__))
    for name in names:
        ref = os.path.join(args.out, name + ".ref.pt")
        if os.path.exists(ref) and os.path.getmtime(ref) > script_time:
            continue
        export_one(name, args.out)
        print(f"exported {name}")
    sym_int = os.path.join(args.out, "sym_int.pt2")
    if not args.only and not (os.path.exists(sym_int) and os.path.getmtime(sym_int) > script_time):
        export_sym_int(args.out)
        print("exported sym_int")


if __name__ == "__main__":
    sys.exit(main())
