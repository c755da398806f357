"""Layers the trainer's tests build models from (imported by the tests; its source is also
written into the generated ``--model`` factory modules of test_train_user_model.py)."""

import torch
from torch import nn


class RunningMean(nn.Module):
    """A custom layer that keeps a running mean of the data in a buffer, updated in training mode:
    running statistics released without privacy, which the trainer must refuse."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(784))
        self.lin = nn.Linear(784, 10)

    def forward(self, x):
        x = x.flatten(1)
        if self.training:
            self.mean.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return self.lin(x - self.mean)
