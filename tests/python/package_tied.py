#!/usr/bin/python3
"""A weight tied across stages: clusterize's verify and the training are exact.

Usage: package_tied.py WORK_DIR   (the package on PYTHONPATH; $RAVNEST_BIN or $RAVNEST_BINARY_DIR
names the binary; /usr/bin/python3 or a torch 2.x venv)

A small language-model-like net whose decoder's weight is its embedding's (tied, as BERT's), cut
in three stages so that the two uses sit on the first and the last stage. Checked: verify's
gradients (over 1 and 2 micro-batches) equal the whole model's exactly, the tied weight's summed
as autograd sums it (libs/graph/stage_chain.h); and the fused weights after one epoch of SGD
equal plain PyTorch's.
"""

import os
import re
import sys

import torch
import torch.nn as nn

import ravnest


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.l1 = nn.Linear(16, 16)
        self.l2 = nn.Linear(16, 16)
        self.l3 = nn.Linear(16, 16)
        self.dec = nn.Linear(16, 50, bias=False)
        self.dec.weight = self.emb.weight

    def forward(self, x):
        h = torch.tanh(self.l1(self.emb(x)))
        h = torch.tanh(self.l3(torch.tanh(self.l2(h))))
        return self.dec(h).sum(1)


def main():
    work = os.path.abspath(sys.argv[1])
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    torch.manual_seed(0)
    model = Tied()
    x, y = torch.randint(0, 50, (32, 7)), torch.randint(0, 50, (32,))

    def loader():
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)

    reference = Tied()
    reference.load_state_dict(model.state_dict())
    with ravnest.local(nodes=3):
        text = ravnest.clusterize(model, example_args=(x,), stages=3, memory_probe=False)
        trainer = ravnest.Trainer(node=ravnest.Node(optimizer="sgd", optimizer_params={"lr": 0.1}),
                                  train_loader=loader(), epochs=1)
        trainer.train()
        state = ravnest.model_fusion()
    verify = re.search(r"verify: largest absolute difference (\S+)", text)
    assert verify, text
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for xb, yb in loader():
        nn.functional.cross_entropy(reference(xb), yb).backward()
        optimizer.step()
        optimizer.zero_grad()
    worst = max((state[k] - v).abs().max().item() for k, v in reference.state_dict().items())
    print("package_tied: torch %s, 3 stages, tied emb/dec: verify %s, fused vs one process %.3g"
          % (torch.__version__, verify.group(1), worst))
    assert float(verify.group(1)) == 0, "verify differs by " + verify.group(1)
    tolerance = 0 if torch.__version__.startswith("1.13") else 1e-5
    assert worst <= tolerance, "fused weights differ from PyTorch's by %g" % worst
    return 0


if __name__ == "__main__":
    sys.exit(main())
