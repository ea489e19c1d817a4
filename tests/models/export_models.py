#!/usr/bin/python3
"""Export the TorchScript test models used by ravnest's C++ tests.

Usage: export_models.py --out DIR [--only NAME[,NAME...]] [--force]

For each model NAME it writes, atomically (tmp file + os.replace):
  DIR/NAME.pt              TorchScript module (ScriptModule.save), in training mode
  DIR/NAME.inputs.pt       torch.save'd tuple of example input tensors (small batch)
  DIR/NAME.state_dict.pt   torch.save'd plain dict (not OrderedDict) of the state dict
  DIR/NAME.train.pt        torch.save'd (inputs, labels): a small training set in the job file's
                           "tensors" format (training_set below)
  DIR/NAME.pt2             with torch >= 2.10, for the models of PT2_MODELS: the same eager module
                           with the same weights through torch.export.export (training mode,
                           dim 0 of every input a batch Dim) and torch.export.save: the .pt2
                           path trains what the TorchScript path trains, on the same data
  DIR/NAME.json            {"name", "inputs": ["4x1x8x8:float32", ...],
                            "state_dict_keys": [...in order...], "outputs": N,
                            "train": {"file", "samples", "loss"}}
The .json is written last, after the saved model was loaded back with
torch.jit.load and run forward+backward on its inputs, so a model counts as
exported only when all five files exist. A model is skipped when its five files
exist and are newer than this script and small_cnn.py.

Runs with the torch the build's LibTorch matches: Debian's /usr/bin/python3 (torch
1.13, torchvision 0.14) for the default build, the environment of scripts/venv (torch
2.x) for the 2.x build (RAVNEST_PYTHON). Nothing is downloaded: torchvision models use
weights=None.
"""

import argparse
import json
import os
import sys
import time
import warnings
from typing import Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from small_cnn import SmallCNN  # noqa: E402

# Files whose changes make every export stale.
# torch 1.13's TransformerEncoderLayer lists 'batch_first' in __constants__ without
# setting it as an attribute; scripting warns about it, harmlessly.
warnings.filterwarnings("ignore", message="'batch_first' was found in ScriptModule constants")
warnings.filterwarnings("ignore", message="Scripted Inception3 always returns Inception3 Tuple")
warnings.filterwarnings("ignore", message="The TorchScript type system doesn't support instance-level")

SOURCES = [os.path.abspath(__file__), os.path.join(HERE, "small_cnn.py")]


# --------------------------------------------------------------------------- models


class TransformerClassifier(nn.Module):
    def __init__(self, vocab: int = 100, d_model: int = 32, num_classes: int = 5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=4, dim_feedforward=64,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=3)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)          # N x T x d
        x = self.encoder(x)                 # N x T x d
        return self.head(x.mean(dim=1))     # N x classes


class TwoInputs(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),                   # 8 * 4 * 4 = 128
            nn.Linear(128, 32), nn.ReLU())
        self.mlp = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
        self.classifier = nn.Linear(32 + 16, num_classes)

    def forward(self, image: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        a = self.conv(image)
        b = self.mlp(features)
        return self.classifier(torch.cat([a, b], dim=1))


class MultiOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.logits_head = nn.Linear(32, 10)
        self.aux_head = nn.Sequential(nn.Linear(32, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.logits_head(h), self.aux_head(h)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.bn1 = nn.BatchNorm1d(32)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(32, 32)
        self.bn2 = nn.BatchNorm1d(32)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.fc1(x)))
        x = self.act2(self.bn2(self.fc2(x)))
        return self.out(x)


class Tied(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.act = nn.ReLU()
        self.decoder = nn.Linear(dim, vocab, bias=False)
        self.decoder.weight = self.embedding.weight  # weight tying: the SAME Parameter

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.act(self.proj(self.embedding(tokens))))  # N x T x vocab


class Reused(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(16, 16)  # applied twice: first and last layer
        self.mid1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.mid2 = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.shared(x))
        x = self.act(self.mid1(x))
        x = self.mid2(x)
        return self.shared(x)


class CausalBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class CausalLM(nn.Module):
    """Decoder-only: one registered causal-mask buffer read by every block (a buffer that
    several stages read, which only needs copying, not the shared-gradient rules)."""

    def __init__(self, vocab: int = 40, d: int = 16, length: int = 8, layers: int = 4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(length, d) * 0.02)
        self.register_buffer("mask", torch.triu(torch.full((length, length), float("-inf")), 1))
        self.blocks = nn.ModuleList([CausalBlock(d, 2) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x)[:, -1])  # next token after the sequence: N x vocab


class CharLM(CausalLM):
    """A character-level language model as Hugging Face's write theirs: logits for every
    position, N x T x vocab, trained with cross_entropy against N x T next characters."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


class InplaceCNN(nn.Module):
    """Convolutions with ReLU(inplace=True) and max pooling; exported with torch.jit.trace. Its
    first activations are large enough (16 x 32 x 32 floats a sample) that a batch of 8 streams
    them, while smaller micro-batches travel inline."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.relu1 = nn.ReLU(inplace=True)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.relu2 = nn.ReLU(inplace=True)
        self.pool2 = nn.MaxPool2d(2)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.relu3 = nn.ReLU(inplace=True)
        self.fc1 = nn.Linear(16 * 8 * 8, 32)
        self.relu4 = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.conv3(x))
        x = torch.flatten(x, 1)
        return self.fc2(self.relu4(self.fc1(x)))


class DropoutTwice(nn.Module):
    """The digits CNN's shape without BatchNorm; its one Dropout module is applied at two
    places, far enough apart to land in different stages."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.3)
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = self.dropout(torch.relu(self.fc2(x)))
        return self.fc3(x)


class TwoInTupleOut(nn.Module):
    """Two inputs, a tuple output whose first tensor is the logits."""

    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Tanh(), nn.Flatten(),
                                   nn.Linear(4 * 8 * 8, 16))
        self.features = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.mix = nn.Linear(32, 16)
        self.logits = nn.Linear(16, 10)
        self.score = nn.Linear(16, 1)

    def forward(self, image: torch.Tensor, features: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        a = self.image(image)
        b = self.features(features)
        h = torch.tanh(self.mix(torch.cat([a, b], dim=1)))
        return self.logits(h), self.score(h) + b.sum(dim=1, keepdim=True)


class LSTMClassifier(nn.Module):
    """Tokens through an embedding and a two-layer LSTM; the last step's output is classified.
    The LSTM's (h, c) tuple and the output slice live inside the graph the cutter sees."""

    def __init__(self, vocab: int = 30, d: int = 16, hidden: int = 24, num_classes: int = 5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(tokens))
        return self.head(torch.relu(self.norm(out[:, -1])))


class ConvGRU(nn.Module):
    """A 1-d convolution over a sequence, a GRU, GELU and a mean over time; float input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 12, kernel_size=3, padding=1)
        self.gru = nn.GRU(12, 16, batch_first=True)
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()
        self.out = nn.Linear(16, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # N x 4 x T
        h = torch.relu(self.conv(x)).transpose(1, 2)      # N x T x 12
        h, _ = self.gru(h)
        return self.out(self.act(self.fc(h.mean(dim=1))))


class Branchy(nn.Module):
    """Data-dependent control flow (an if on a tensor's value, a while loop): the cutter must
    keep each such block in one stage."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 16)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        if bool(h.sum() > 0):
            h = torch.relu(self.a(h))
        else:
            h = torch.sigmoid(self.a(h))
        h = h + self.b(h)
        i = 0
        while i < 2:
            h = h + 0.5 * torch.tanh(h)
            i += 1
        for layer in self.layers:
            h = torch.relu(layer(h)) + h
        return self.out(h)


class FrozenParts(nn.Module):
    """Fine-tuning shapes: a block computed under torch.no_grad() (TorchScript writes it as a
    prim::Enter / prim::Exit pair in the middle of the graph, not as a nested block) and a layer
    whose parameters have requires_grad=False."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 16)
        self.c.requires_grad_(False)
        self.d = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        with torch.no_grad():
            g = torch.relu(self.b(h))
            g = g * 2.0
        h = torch.tanh(self.c(h + g))
        return self.out(torch.relu(self.d(h)))


# Parameters that get no gradient by design (computed under torch.no_grad()).
NO_GRAD = {"frozen_parts": {"b.weight", "b.bias"}}


class SegmentationNet(nn.Module):
    """torchvision's segmentation models in miniature: a backbone whose intermediate and last
    features feed two heads, upsampled to the input's size, returned as a dict {"out", "aux"}
    (TorchScript: Dict[str, Tensor]); trained per pixel with cross_entropy on "out"."""

    def __init__(self, classes: int = 3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.deep = nn.Sequential(nn.Conv2d(16, 16, 3, padding=2, dilation=2), nn.ReLU())
        self.head = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Conv2d(8, classes, 1))
        self.aux = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        size = x.shape[-2:]
        features = self.mid(self.stem(x))
        result: Dict[str, torch.Tensor] = {}
        out = self.head(self.deep(features))
        result["out"] = F.interpolate(out, size=[int(size[0]), int(size[1])], mode="bilinear",
                                      align_corners=False)
        result["aux"] = F.interpolate(self.aux(features), size=[int(size[0]), int(size[1])],
                                      mode="bilinear", align_corners=False)
        return result


# --------------------------------------------------------------------------- builders
# Each builder is called right after torch.manual_seed(0) and returns
# (model in training mode, TorchScript module, list of example inputs).

Built = Tuple[nn.Module, torch.jit.ScriptModule, List[torch.Tensor]]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def _script(model: nn.Module) -> torch.jit.ScriptModule:
    model.train()
    sm = torch.jit.script(model)
    sm.train()
    return sm


def _tv(ctor_name: str) -> Callable[[], Built]:
    def build() -> Built:
        import torchvision
        model = getattr(torchvision.models, ctor_name)(weights=None, num_classes=10)
        return model, _script(model), [torch.randn(2, 3, 64, 64, generator=_gen())]
    return build


def build_small_cnn() -> Built:
    model = SmallCNN()
    return model, _script(model), [torch.rand(4, 1, 8, 8, generator=_gen())]


def build_transformer() -> Built:
    model = TransformerClassifier()
    return model, _script(model), [torch.randint(0, 100, (4, 11), generator=_gen())]


def build_two_inputs() -> Built:
    model = TwoInputs()
    g = _gen()
    return model, _script(model), [torch.rand(4, 1, 8, 8, generator=g), torch.randn(4, 6, generator=g)]


def build_multi_output() -> Built:
    model = MultiOutput()
    return model, _script(model), [torch.randn(4, 16, generator=_gen())]


def build_traced_mlp() -> Built:
    model = MLP()
    model.train()
    example = torch.randn(4, 20, generator=_gen())
    # Traced in training mode: BatchNorm's training=True is baked into the graph
    # (it keeps using batch statistics even after .eval()). Tracing runs forward,
    # so the running stats get updated once; check_trace=False avoids extra runs.
    traced = torch.jit.trace(model, (example,), check_trace=False)
    traced.train()
    return model, traced, [example]


def build_tied() -> Built:
    model = Tied()
    return model, _script(model), [torch.randint(0, 50, (4, 7), generator=_gen())]


def build_reused() -> Built:
    model = Reused()
    return model, _script(model), [torch.randn(4, 16, generator=_gen())]


def build_causal_lm() -> Built:
    model = CausalLM()
    return model, _script(model), [torch.randint(0, 40, (4, 8), generator=_gen())]


def build_char_lm() -> Built:
    """CharLM small enough for CI: 2 blocks, width 32, 16 characters, a vocabulary of 30."""
    model = CharLM(vocab=30, d=32, length=16, layers=2)
    return model, _script(model), [torch.randint(0, 30, (4, 16), generator=_gen())]


def build_gpt_mini() -> Built:
    """CausalLM at a GPT-like scale: 3.2M parameters (vocabulary 2048, width 256, 4 blocks,
    32 tokens), so that a stage trained with Adam holds tens of MB and a daemon's memory is more
    than its idle baseline (tests/integration/test_memory_fit.cpp)."""
    model = CausalLM(vocab=2048, d=256, length=32, layers=4)
    return model, _script(model), [torch.randint(0, 2048, (4, 32), generator=_gen())]


def build_traced_inplace() -> Built:
    model = InplaceCNN()
    model.train()
    example = torch.randn(4, 3, 32, 32, generator=_gen())
    traced = torch.jit.trace(model, (example,), check_trace=False)
    traced.train()
    return model, traced, [example]


def build_dropout_twice() -> Built:
    model = DropoutTwice()
    return model, _script(model), [torch.rand(4, 1, 8, 8, generator=_gen())]


def build_two_in_tuple_out() -> Built:
    model = TwoInTupleOut()
    g = _gen()
    return model, _script(model), [torch.rand(4, 1, 8, 8, generator=g), torch.randn(4, 6, generator=g)]


def build_inception() -> Built:
    import torchvision
    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                            num_classes=10)
    return model, _script(model), [torch.randn(2, 3, 75, 75, generator=_gen())]


def build_lstm() -> Built:
    model = LSTMClassifier()
    return model, _script(model), [torch.randint(0, 30, (4, 9), generator=_gen())]


def build_conv_gru() -> Built:
    model = ConvGRU()
    return model, _script(model), [torch.randn(4, 4, 12, generator=_gen())]


def build_branchy() -> Built:
    model = Branchy()
    return model, _script(model), [torch.randn(4, 10, generator=_gen())]


def build_frozen_parts() -> Built:
    model = FrozenParts()
    return model, _script(model), [torch.randn(4, 10, generator=_gen())]


def build_segmentation() -> Built:
    model = SegmentationNet()
    return model, _script(model), [torch.randn(2, 3, 12, 12, generator=_gen())]


def build_convnext_mini() -> Built:
    """torchvision's ConvNeXt in miniature: LayerNorm over channels between permutes, so the
    activations where cuts fall are channels-last views that convolutions read; layer scale;
    stochastic depth (random, in training)."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)],
                     stochastic_depth_prob=0.1, num_classes=10)
    return model, _script(model), [torch.randn(4, 3, 16, 16, generator=_gen())]


MODELS: Dict[str, Callable[[], Built]] = {
    "resnet18": _tv("resnet18"),
    "resnet50": _tv("resnet50"),
    "mobilenet_v2": _tv("mobilenet_v2"),
    "small_cnn": build_small_cnn,
    "transformer": build_transformer,
    "two_inputs": build_two_inputs,
    "multi_output": build_multi_output,
    "traced_mlp": build_traced_mlp,
    "tied": build_tied,
    "reused": build_reused,
    "causal_lm": build_causal_lm,
    "gpt_mini": build_gpt_mini,
    "char_lm": build_char_lm,
    "traced_inplace": build_traced_inplace,
    "dropout_twice": build_dropout_twice,
    "two_in_tuple_out": build_two_in_tuple_out,
    "inception_v3": build_inception,
    "lstm": build_lstm,
    "conv_gru": build_conv_gru,
    "branchy": build_branchy,
    "frozen_parts": build_frozen_parts,
    "convnext_mini": build_convnext_mini,
    "segmentation": build_segmentation,
}


# --------------------------------------------------------------------------- export


def spec(t: torch.Tensor) -> str:
    return "x".join(str(d) for d in t.shape) + ":" + str(t.dtype).replace("torch.", "")


# Exported as .pt2 too where torch has torch.export's training IR: CNNs with in-place ops, a
# transformer, several inputs and outputs, tied weights, a registered mask buffer, an LSTM,
# dropout twice, a U-Net-like skip, torchvision's resnet18.
PT2_MODELS = ("small_cnn", "transformer", "two_inputs", "multi_output", "tied", "causal_lm",
              "lstm", "dropout_twice", "segmentation", "resnet18", "traced_inplace")


def exports_pt2(name: str) -> bool:
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return name in PT2_MODELS and version >= (2, 10)


def paths(out: str, name: str) -> Dict[str, str]:
    files = {
        "model": os.path.join(out, name + ".pt"),
        "inputs": os.path.join(out, name + ".inputs.pt"),
        "state_dict": os.path.join(out, name + ".state_dict.pt"),
        "train": os.path.join(out, name + ".train.pt"),
    }
    if exports_pt2(name):
        files["pt2"] = os.path.join(out, name + ".pt2")
    files["json"] = os.path.join(out, name + ".json")
    return files


def export_pt2(model: nn.Module, inputs: List[torch.Tensor], path: str) -> None:
    """torch.export of `model` in training mode, dim 0 of every input a batch Dim, saved (the
    archive's root folder is named after the file it is written as, so not through atomic)."""
    batch = torch.export.Dim("batch", min=2, max=4096)
    model.train()
    with torch.random.fork_rng(devices=[]):
        program = torch.export.export(model, tuple(inputs),
                                      dynamic_shapes=tuple({0: batch} for _ in inputs))
    scratch = os.path.join(os.path.dirname(path), ".writing-%d" % os.getpid())
    os.makedirs(scratch, exist_ok=True)
    written = os.path.join(scratch, os.path.basename(path))
    torch.export.save(program, written)
    os.replace(written, path)
    os.rmdir(scratch)


def up_to_date(files: Dict[str, str]) -> bool:
    newest_source = max(os.path.getmtime(s) for s in SOURCES)
    return all(os.path.exists(p) and os.path.getmtime(p) > newest_source for p in files.values())


def atomic(path: str, write: Callable[[str], None]) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def flatten_outputs(out) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if out is None:  # e.g. Inception's aux output when aux_logits=False
        return []
    if isinstance(out, (tuple, list)):
        res: List[torch.Tensor] = []
        for o in out:
            res.extend(flatten_outputs(o))
        return res
    if isinstance(out, dict):
        return flatten_outputs(list(out.values()))
    raise TypeError("unsupported output type %s" % type(out).__name__)


TRAIN_SAMPLES = 16
# Models whose output is N x T x vocab: trained on the next characters, N x T, with padding.
LANGUAGE_MODELS = {"char_lm"}


def training_set(sm: torch.jit.ScriptModule, inputs: List[torch.Tensor], language_model: bool = False):
    """A small training set for the training-fidelity tests, in the "tensors" format: inputs like
    the example's (integer inputs within the example's range), and labels for cross_entropy when
    the model's (first) output is N x C, else regression targets of that output's shape for mse."""
    g = torch.Generator().manual_seed(4321)
    data = []
    for t in inputs:
        shape = (TRAIN_SAMPLES,) + tuple(t.shape[1:])
        if t.is_floating_point():
            data.append(torch.randn(shape, generator=g).to(t.dtype))
        else:
            data.append(torch.randint(0, int(t.max()) + 1, shape, generator=g).to(t.dtype))
    with torch.no_grad():
        sm.eval()
        out = sm(*[d[:2] for d in data])
        first = flatten_outputs(out)[0]
        sm.train()
    if language_model:
        # The next character at every position (a random one after the last), and padding
        # (cross_entropy's ignore_index, -100) at the end of three samples in four: the
        # micro-batches then hold different counts of labels that count.
        tokens = data[0]
        labels = torch.cat([tokens[:, 1:], torch.randint(0, first.shape[-1], (TRAIN_SAMPLES, 1),
                                                        generator=g)], 1)
        for i in range(TRAIN_SAMPLES):
            pad = (i % 4) * 3
            if pad:
                labels[i, -pad:] = -100
        return (tokens, labels), "cross_entropy"
    if first.dim() >= 2 and first.shape[1] > 1 and (first.dim() == 2 or isinstance(out, dict)):
        # Classes in dimension 1: one label per sample, or per pixel (a segmentation dict).
        loss = "cross_entropy"
        labels = torch.randint(0, first.shape[1], (TRAIN_SAMPLES,) + tuple(first.shape[2:]),
                               generator=g)
    else:
        loss = "mse"
        labels = torch.randn((TRAIN_SAMPLES,) + tuple(first.shape[1:]), generator=g)
    return (tuple(data) if len(data) > 1 else data[0], labels), loss


def verify(name: str, files: Dict[str, str], keys: List[str]) -> int:
    """Load back what was written, run forward+backward; return the number of outputs."""
    m = torch.jit.load(files["model"])
    m.train()
    inputs = torch.load(files["inputs"])
    assert isinstance(inputs, tuple) and all(isinstance(t, torch.Tensor) for t in inputs)
    sd = torch.load(files["state_dict"])
    assert type(sd) is dict, "state dict must be a plain dict, got %s" % type(sd).__name__
    assert list(sd.keys()) == keys == list(m.state_dict().keys()), "state dict keys differ"
    outs = flatten_outputs(m(*inputs))
    loss = sum(o.float().square().mean() for o in outs)
    loss.backward()
    params = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    expected_none = NO_GRAD.get(name, set())
    missing = [n for n, p in params if p.grad is None and n not in expected_none]
    if not params or missing:
        raise RuntimeError("backward left parameters without grad: %s" % missing[:5])
    return len(outs)


def export(name: str, out: str, force: bool) -> str:
    files = paths(out, name)
    if not force and up_to_date(files):
        return "%-13s up to date" % name
    t0 = time.time()
    torch.manual_seed(0)
    eager, sm, inputs = MODELS[name]()
    sm.train()
    sd = dict(sm.state_dict())  # plain dict: C++ pickle_load can't read OrderedDict
    keys = list(sd.keys())
    if "pt2" in files:
        eager.load_state_dict(sd)
        export_pt2(eager, inputs, files["pt2"])

    atomic(files["model"], lambda p: sm.save(p))
    atomic(files["inputs"], lambda p: torch.save(tuple(inputs), p))  # LibTorch cannot unpickle a one-element list
    atomic(files["state_dict"], lambda p: torch.save(sd, p))
    train, loss = training_set(sm, inputs, language_model=name in LANGUAGE_MODELS)
    atomic(files["train"], lambda p: torch.save(train, p))
    t1 = time.time()
    n_out = verify(name, files, keys)
    t2 = time.time()
    meta = {"name": name, "inputs": [spec(t) for t in inputs],
            "state_dict_keys": keys, "outputs": n_out,
            "train": {"file": os.path.basename(files["train"]), "samples": TRAIN_SAMPLES,
                      "loss": loss}}

    def write_json(p: str) -> None:
        with open(p, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
    atomic(files["json"], write_json)  # last: marks the export complete
    n_params = sum(p.numel() for p in sm.parameters())
    return "%-13s exported  inputs=%s outputs=%d keys=%d params=%d  (export %.2fs, verify %.2fs)" % (
        name, ",".join(meta["inputs"]), n_out, len(keys), n_params, t1 - t0, t2 - t1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    args = ap.parse_args()

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print("unknown model(s): %s; known: %s" % (",".join(unknown), ",".join(MODELS)), file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # the test machines are small and shared

    t0 = time.time()
    failed = []
    for name in names:
        try:
            print(export(name, args.out, args.force), flush=True)
        except Exception as e:  # report every model, fail at the end
            failed.append(name)
            print("%-13s FAILED: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
                  flush=True)
    print("%d model(s) in %.1fs%s" % (len(names), time.time() - t0,
                                       "; FAILED: " + ",".join(failed) if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
