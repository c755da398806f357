"""Models for DP-SGD on 28×28 grey-scale images.

* ``tanh-cnn`` (default): the MNIST convolutional network of Papernot, Thakurta, Song,
  Chien, Erlingsson, "Tempered Sigmoid Activations for Deep Learning with Differential
  Privacy" (AAAI 2021, arXiv:2007.14191), Table 1 architecture with tanh activations:
  conv 16 filters 8×8 stride 2 padding 3 → tanh → max-pool 2×2 stride 1 →
  conv 32 filters 4×4 stride 2 → tanh → max-pool 2×2 stride 1 → dense 512→32 → tanh →
  dense 32→10 (26,010 parameters). The same network is the "end-to-end CNN" baseline of
  Tramèr & Boneh, "Differentially Private Learning Needs Better Features" (ICLR 2021).
* ``logistic``: multinomial logistic regression on the 784 normalised pixels (7,850 parameters).
* ``scatternet-linear``, ``scatternet-cnn``: a linear model or a small CNN on fixed ScatterNet
  features (Tramèr & Boneh 2021; :mod:`dpcalc.train.scatternet`, which also maps the images
  to those features).

* ``package.module:factory``: a user's model, ``factory()`` returning a ``torch.nn.Module``
  (:mod:`dpcalc.train.user_model`).

Every model, built-in or a user's, passes :func:`dpcalc.train.model_checks.check_model`:
layers that mix the examples of a batch or keep running statistics of the data are refused
(that module says why).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dpcalc.errors import ParameterError
from dpcalc.train.model_checks import check_model
from dpcalc.train.scatternet import SCATTERNET_MODELS
from dpcalc.train.user_model import load_user_model

__all__ = ["MODELS", "TanhCNN", "LogisticRegression", "build_model", "max_pool_2x2_stride_1",
           "validate_model_name"]


class _ToChannelsLast(torch.autograd.Function):
    """The identity, with its output stored channels-last (NHWC) and its gradient returned
    NCHW-contiguous: the layers before it see the same gradient, in the same layout, as
    without it."""

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        return h.contiguous(memory_format=torch.channels_last)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def max_pool_2x2_stride_1(h: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(h, kernel_size=2, stride=1)``, the same values and gradients, faster.

    Args:
        h: (B, C, H, W) activations, or one example (C, H, W).

    Returns:
        (B, C, H−1, W−1) (or (C, H−1, W−1)), NCHW-contiguous.

    For a batch on the CPU the pooling runs on a channels-last copy: PyTorch's CPU kernel for
    NCHW is several times slower (measured, torch 2.13, one thread, (1024, 16, 14, 14): 58 ms
    forward NCHW, 11 ms through channels-last with both copies). The maximum of a window is exact and
    both kernels send each output's gradient to the first maximum of its window and add
    into each input position in the same order, so values and gradients are bit-identical
    (tests/train/test_train_models.py); the gradient flowing back is made NCHW-contiguous
    again, so the convolution before the pooling sees exactly what it saw without the copy.
    On other devices and under ``torch.func`` transforms the plain kernel runs.
    """
    # under torch.func transforms (vmap, grad) the layout cannot be chosen: the plain kernel
    if h.dim() == 4 and h.device.type == "cpu" and not torch._C._functorch.is_functorch_wrapped_tensor(h):
        return F.max_pool2d(_ToChannelsLast.apply(h), kernel_size=2, stride=1).contiguous()
    return F.max_pool2d(h, kernel_size=2, stride=1)


class TanhCNN(nn.Module):
    """The tanh CNN of Papernot et al. 2021 (tempered sigmoids) for 28×28 grey-scale images.

    Accepts a batch (B, 1, 28, 28) -> logits (B, 10), or one unbatched image (1, 28, 28)
    -> logits (10,) (the per-example form DP-SGD differentiates under ``vmap``).
    """

    #: ``forward`` accepts one example without a batch dimension
    supports_unbatched = True

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=8, stride=2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=4, stride=2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for images of shape (B, 1, 28, 28) or (1, 28, 28)."""
        h = max_pool_2x2_stride_1(torch.tanh(self.conv1(x)))  # 16×13×13
        h = max_pool_2x2_stride_1(torch.tanh(self.conv2(h)))  # 32×4×4
        return self.fc2(torch.tanh(self.fc1(h.flatten(-3))))


class LogisticRegression(nn.Module):
    """Multinomial logistic regression on the 784 pixels (a convex baseline)."""

    supports_unbatched = True

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.linear = nn.Linear(28 * 28, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for images of shape (B, 1, 28, 28) or (1, 28, 28)."""
        return self.linear(x.flatten(-3))


MODELS = {"tanh-cnn": TanhCNN, "logistic": LogisticRegression, **SCATTERNET_MODELS}


def validate_model_name(name: str) -> str:
    """Check a ``--model`` value: a built-in name, or ``package.module:factory`` (imported,
    called once and checked as :func:`dpcalc.train.user_model.load_user_model` does).

    Raises:
        ParameterError: neither a built-in nor a loadable factory (one-line reason).
    """
    if isinstance(name, str) and ":" in name:
        load_user_model(name, seed=0)
        return name
    if name not in MODELS:
        raise ParameterError("model", "one of " + ", ".join(MODELS) + " or package.module:factory", name)
    return name


def build_model(name: str, *, seed: int) -> nn.Module:
    """A freshly initialised model by name, deterministic in ``seed``.

    Args:
        name: a key of :data:`MODELS`, or ``package.module:factory`` for a user's model.
        seed: the seed of the initialisation (torch's global generator is left untouched).

    Raises:
        ParameterError: unknown name; a factory that cannot be loaded or returns an unusable
            model (:func:`dpcalc.train.user_model.load_user_model`).
    """
    if ":" in name:
        return load_user_model(name, seed=seed)
    validate_model_name(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MODELS[name]()
    check_model(model)
    return model
