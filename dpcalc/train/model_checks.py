"""Which layers DP-SGD's per-example clipping can train: the check every model passes, built-in
(:mod:`dpcalc.train.models`) or a user's (:mod:`dpcalc.train.user_model`).

Batch normalisation mixes the examples of a batch, so one example's gradient depends on the
others and per-example clipping no longer bounds its influence: such layers are refused.
Layers that keep running statistics of the data (batch norm, instance norm with
``track_running_stats=True``) are refused for a second reason: those buffers are computed from
the training data without clipping or noise and are released with the model. GroupNorm,
LayerNorm and instance norm without running statistics normalise each example on its own:
accepted.
"""

from __future__ import annotations

from torch import nn

from dpcalc.errors import ParameterError

__all__ = ["check_model"]

_BATCHNORM = (nn.modules.batchnorm._BatchNorm, nn.SyncBatchNorm)
_INSTANCENORM = nn.modules.instancenorm._InstanceNorm


def check_model(model: nn.Module) -> None:
    """Refuse layers that DP-SGD's per-example clipping cannot handle.

    Raises:
        ParameterError: the model contains batch normalisation (it mixes the examples
            of a batch: one example's gradient then depends on the others, so clipping
            each example's gradient no longer bounds its contribution), or instance
            normalisation with ``track_running_stats=True`` (its running mean and variance
            are averages over the training data, updated without clipping or noise and
            released with the model). GroupNorm, LayerNorm and instance norm without running
            statistics treat each example on its own and are acceptable.
    """
    for name, module in model.named_modules():
        layer = f"model layer {name or '<root>'} is {type(module).__name__}"
        if isinstance(module, _BATCHNORM):
            raise ParameterError(
                "model", "", type(module).__name__,
                message=f"{layer}: batch "
                        "normalisation mixes the examples of a batch, so per-example clipping "
                        "does not bound one example's influence (use GroupNorm or LayerNorm)")
        if isinstance(module, _INSTANCENORM) and module.track_running_stats:
            raise ParameterError(
                "model", "", type(module).__name__,
                message=f"{layer} with track_running_stats=True: its running statistics are "
                        "averages over the training data, neither clipped nor noised, released "
                        "with the model (use track_running_stats=False, GroupNorm or LayerNorm)")
