#!/usr/bin/python3
"""torch_optimizer.Lamb's steps, the reference of test_lamb (libs/training/lamb.h).

Usage: lamb_reference.py OUT

Runs 5 steps of torch_optimizer.Lamb in each of the cases below over the same seeded float32
parameters: a matrix, a vector, a 3-D tensor of norm above some cases' clamp_value, a vector of
zeros (weight norm 0), and a vector whose gradient is always 0 (with weight_decay 0 its step's
norm is 0) and is missing (None, skipped) at step 2. Saves with torch.save a tuple of cases,
each (options, initial, steps, final_state):
  options      float64 [lr, beta1, beta2, eps, weight_decay, clamp_value, adam, debias]
  initial      the parameters before the first step
  steps        per step (grads, params): the gradients given (None where missing) and the
               parameters after the step
  final_state  per parameter (exp_avg, exp_avg_sq, step as an int64 tensor)
Exits 3 with one line on stderr when this Python has no torch_optimizer.
"""

import sys

import torch

try:
    import torch_optimizer
except ImportError:
    print("lamb_reference.py: torch_optimizer is not installed for " + sys.executable,
          file=sys.stderr)
    sys.exit(3)

# (lr, betas, eps, weight_decay, clamp_value, adam, debias)
CASES = [
    # Ravnest's BERT example: lr 0.00176, eps 1e-6, debias, weight_decay 0.01, clamp_value 1e4.
    (0.00176, (0.9, 0.999), 1e-6, 0.01, 10000.0, False, True),
    # torch_optimizer's defaults with a larger lr: no weight decay, no debias, clamp_value 10.
    (0.01, (0.9, 0.999), 1e-6, 0.0, 10.0, False, False),
    # adam=True: trust ratio 1, with weight decay and debias.
    (0.005, (0.8, 0.95), 1e-8, 0.1, 10.0, True, True),
    # A clamp_value below the weight norms, weight decay, no debias.
    (0.02, (0.85, 0.99), 1e-7, 0.05, 0.5, False, False),
]
SHAPES = [(4, 3), (5,), (2, 3, 2), (3,), (6,)]
STEPS = 5


def main():
    out = sys.argv[1]
    saved = []
    for lr, betas, eps, wd, clamp, adam, debias in CASES:
        g = torch.Generator().manual_seed(5)
        params = [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in SHAPES]
        with torch.no_grad():
            params[2].mul_(3.0)   # norm about 10: above clamp_value 0.5, below 10000
            params[3].zero_()     # weight norm 0
        opt = torch_optimizer.Lamb(params, lr=lr, betas=betas, eps=eps, weight_decay=wd,
                                   clamp_value=clamp, adam=adam, debias=debias)
        options = torch.tensor([lr, betas[0], betas[1], eps, wd, clamp, float(adam), float(debias)],
                               dtype=torch.float64)
        initial = tuple(p.detach().clone() for p in params)
        steps = []
        for step in range(STEPS):
            grads = []
            for i, p in enumerate(params):
                if i == 4:
                    grad = None if step == 1 else torch.zeros_like(p)
                else:
                    grad = torch.randn(p.shape, generator=g)
                p.grad = grad
                grads.append(None if grad is None else grad.clone())
            opt.step()
            steps.append((tuple(grads), tuple(p.detach().clone() for p in params)))
        final_state = tuple((opt.state[p]["exp_avg"].clone(), opt.state[p]["exp_avg_sq"].clone(),
                             torch.tensor(opt.state[p]["step"], dtype=torch.int64))
                            for p in params)
        saved.append((options, initial, tuple(steps), final_state))
    torch.save(tuple(saved), out)


if __name__ == "__main__":
    main()
