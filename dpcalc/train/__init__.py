"""The DP-SGD trainer behind ``dpcalc train`` (optional extra ``dpcalc[train]``: torch, pooch, platformdirs).

The only part of dpcalc that imports torch. Modules: ``data`` (MNIST-format IDX files),
``models`` (tanh CNN, logistic regression), ``dpsgd`` (Poisson sampling, per-example
clipping, noise), ``checkpoint`` (atomic checkpoints and the privacy ledger), ``loop``
(the training job and its certified ε). Progress goes out through the ``loop.Reporter``
protocol; the rich display is ``dpcalc.cli.progress`` (this package never imports the
CLI, click or rich).
"""
