"""The DP-SGD trainer behind ``dpcalc train`` (optional extra ``dpcalc[train]``: torch, pooch, platformdirs).

The only part of dpcalc that imports torch. Modules: ``data`` (MNIST-format IDX files),
``models`` (tanh CNN, logistic regression; ``user_model``: a user's factory; ``model_checks``:
the layers DP-SGD refuses), ``dpsgd`` (Poisson sampling, per-example clipping, noise),
``samplers`` (the other batch samplers), ``checkpoint`` (atomic checkpoints and the privacy
ledger), ``config`` (the run's settings and their checks), ``privacy`` (the run's accountant,
history, calibration and budget), ``results`` (the result types and the ``Reporter``
protocol), ``loop`` (the training job). Progress goes out through the ``results.Reporter``
protocol; the rich display is ``dpcalc.cli.progress`` (this package never imports the
CLI, click or rich).
"""
