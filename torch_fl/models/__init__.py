"""Reference models used to find and test the ops a backend must run.

Defined here (not imported from torchvision) so that any backend can be checked
with nothing but torch installed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .gpt import GPT, GPTConfig
from .resnet import BasicBlock, ResNet, resnet18

__all__ = ["BasicBlock", "GPT", "GPTConfig", "ResNet", "resnet18", "train_step"]


def train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
               optimizer: torch.optim.Optimizer) -> float:
    """One optimisation step; returns the loss as a Python float.

    `batch` is (inputs, targets): images and class ids for a classifier (loss is
    cross-entropy of the logits), token ids and next-token ids for `GPT` (the model
    computes its own loss).
    """
    model.train()
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    if isinstance(model, GPT):
        _, loss = model(inputs, targets)
    else:
        loss = F.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return float(loss.detach())
