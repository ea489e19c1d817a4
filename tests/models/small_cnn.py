"""SmallCNN: a tiny classifier for sklearn's 8x8 digits (10 classes).

Input: N x 1 x 8 x 8 float32. Pixels in the digits data are 0..16; the model does
NOT scale them -- the data loader is expected to feed pixel / 16 (values in [0, 1]).

Importable from other scripts (tests/models/export_models.py, examples/digits/...)
by putting this directory on sys.path. Kept TorchScript-friendly (torch.jit.script).
"""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)  # 8x8 -> 4x4
        self.dropout = nn.Dropout(0.25)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.bn2(self.conv2(x)))
        x = self.pool(x)
        x = self.dropout(x)
        x = self.flatten(x)
        x = self.relu3(self.fc1(x))
        return self.fc2(x)
