#!/usr/bin/python3
"""A weight tied across stages: clusterize's verify and the training are exact.

Usage: package_tied.py WORK_DIR   (the package on PYTHONPATH; $RAVNEST_BIN or $RAVNEST_BINARY_DIR
names the binary; /usr/bin/python3 or a torch 2.x venv)

A small language-model-like net whose decoder's weight is its embedding's (tied, as BERT's), cut
in three stages so that the two uses sit on the first and the last stage. Checked: verify's
gradients (over 1 and 2 micro-batches) equal the whole model's exactly, the tied weight's summed
as autograd sums it (libs/graph/stage_chain.h); and the fused weights after one epoch of SGD
(4 updates) equal plain PyTorch's, with whole batches, with 4 micro-batches a batch and with 2
micro-batches and update_frequency 2: each stage keeps its share of the tied weight's gradient
per micro-batch and the update adds them as autograd does, each micro-batch's two shares first
(StageRings::sum_shared_gradients; before, each stage summed its own over the micro-batches
first: 1.2e-7 to 2.5e-7 off with 4 micro-batches).
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


def one_process(reference, loader, micro_batches, update_frequency=1):
    """Plain PyTorch: each batch cut into `micro_batches` contiguous parts, each part's mean loss
    weighted by its share of the batch over update_frequency, backward after backward, one SGD
    step every update_frequency batches (and after the last)."""
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    batches = list(loader())
    for i, (xb, yb) in enumerate(batches):
        for xm, ym in zip(xb.chunk(micro_batches), yb.chunk(micro_batches)):
            loss = nn.functional.cross_entropy(reference(xm), ym) * (len(ym) / len(yb) /
                                                                      update_frequency)
            loss.backward()
        if (i + 1) % update_frequency == 0 or i + 1 == len(batches):
            optimizer.step()
            optimizer.zero_grad()
    return reference.state_dict()


def main():
    work = os.path.abspath(sys.argv[1])
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    torch.manual_seed(0)
    model = Tied()
    x, y = torch.randint(0, 50, (32, 7)), torch.randint(0, 50, (32,))

    def loader():
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)

    start = {k: v.clone() for k, v in model.state_dict().items()}
    worst = {}
    with ravnest.local(nodes=3):
        for micro_batches, update_frequency in ((1, 1), (4, 1), (2, 2)):
            model.load_state_dict(start)
            text = ravnest.clusterize(model, example_args=(x,), stages=3, memory_probe=False,
                                      format="torchscript")
            verify = re.search(r"verify: largest absolute difference (\S+)", text)
            assert verify, text
            assert float(verify.group(1)) == 0, "verify differs by " + verify.group(1)
            trainer = ravnest.Trainer(node=ravnest.Node(optimizer="sgd",
                                                        optimizer_params={"lr": 0.1}),
                                      train_loader=loader(), epochs=1, step_size=micro_batches,
                                      update_frequency=update_frequency)
            trainer.train()
            state = ravnest.model_fusion()
            reference = Tied()
            reference.load_state_dict(start)
            expected = one_process(reference, loader, micro_batches, update_frequency)
            worst[micro_batches, update_frequency] = max((state[k] - v).abs().max().item()
                                       for k, v in expected.items())
    print("package_tied: torch %s, 3 stages, tied emb/dec: verify 0, fused vs one process %s"
          % (torch.__version__, ", ".join("%.3g (%d micro-batches, update_frequency %d)" % (w, m, u)
                                          for (m, u), w in worst.items())))
    tolerance = 0 if torch.__version__.startswith("1.13") else 1e-5
    for (m, u), w in worst.items():
        assert w <= tolerance, "%d micro-batches, update_frequency %d: the fused weights differ " \
            "from PyTorch's by %g" % (m, u, w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
