"""``--model package.module:factory``: DP-SGD on a user's ``torch.nn.Module``.

``factory`` (an attribute of the module, dotted paths such as ``Class.method`` allowed) is
called with no arguments and must return a ``torch.nn.Module`` mapping a batch of
(B, 1, 28, 28) float images to (B, 10) logits. The module is imported like ``python -m``
would: the current directory is searched first.

What the trainer does with it (docs/design.md §6):

* layers that mix the examples of a batch, or keep running statistics of the data, are
  refused with the reason (:func:`dpcalc.train.model_checks.check_model`): batch norm, instance
  norm with running statistics; GroupNorm, LayerNorm are accepted;
* an ``nn.Sequential`` tree of the layers :mod:`dpcalc.train.ghost` knows (Linear, Conv2d,
  Embedding, LayerNorm, GroupNorm, InstanceNorm without running statistics, activations,
  pooling, Flatten) takes the fast path — per-example norms from activations and output
  gradients, ghost norms where cheaper, book-keeping sum;
* anything else — a custom ``forward``, another layer type — takes ``torch.func``: each
  example's gradient from a forward pass over that example alone, exact whatever the model does.

Every failure is a :class:`~dpcalc.errors.ParameterError` naming ``--model`` with a one-line
reason (the CLI exits with status 2).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterator

import torch
from torch import nn

from dpcalc.errors import ParameterError
from dpcalc.train.model_checks import check_model

__all__ = ["load_user_model", "parse_spec", "INPUT_SHAPE", "NUM_CLASSES"]

#: the input of one example (MNIST-format images after :func:`dpcalc.train.data.prepare_images`)
INPUT_SHAPE = (1, 28, 28)
#: the number of classes the logits must have
NUM_CLASSES = 10

_SPEC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")


def _fail(spec: str, reason: str) -> ParameterError:
    return ParameterError("model", "a built-in model or package.module:factory", spec,
                          message=f"--model {spec if spec.isprintable() else repr(spec)}: {reason}")


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def parse_spec(spec: str) -> tuple[str, str]:
    """``"package.module:factory"`` -> ``("package.module", "factory")``.

    Raises:
        ParameterError: not of that form (Python identifiers separated by dots, one colon).
    """
    m = _SPEC.match(spec)
    if m is None:
        raise _fail(spec, "expected package.module:factory (Python identifiers, one colon)")
    return m.group(1), m.group(2)


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The current directory first on sys.path while importing (as ``python -m`` has it)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


def _resolve(spec: str):
    module_name, attr = parse_spec(spec)
    with _cwd_on_path():
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
                raise _fail(spec, f"no module named {e.name!r}") from None
            raise _fail(spec, f"importing {module_name} failed: {_one_line(e)}") from None
        except (Exception, SystemExit) as e:  # the user's module raised while being imported
            raise _fail(spec, f"importing {module_name} failed: {_one_line(e)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _fail(spec, f"{module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise _fail(spec, f"{module_name}.{attr} is not callable (a function or class returning a "
                          "torch.nn.Module)")
    return obj


def load_user_model(spec: str, *, seed: int) -> nn.Module:
    """Import ``package.module:factory``, call ``factory()`` with torch seeded by ``seed``
    (the global generator restored afterwards) and check the model.

    Args:
        spec: ``package.module:factory``.
        seed: initialisation seed (the model is deterministic in it when the factory uses
            torch's global generator, as ``nn`` layers do).

    Returns:
        The model, in training mode.

    Raises:
        ParameterError: a malformed spec; a module or attribute that does not exist; an
            exception while importing or calling the factory; a result that is not an
            ``nn.Module``, has no trainable parameter, contains a refused layer
            (:func:`~dpcalc.train.model_checks.check_model`), does not map (B, 1, 28, 28) batches
            to (B, 10) logits for B in :data:`PROBE_BATCHES`, changes its parameters or buffers in
            forward, or has no per-example gradient through ``torch.func``.
    """
    factory = _resolve(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = factory()
        except (Exception, SystemExit) as e:
            raise _fail(spec, f"calling the factory raised {_one_line(e)}") from None
    if not isinstance(model, nn.Module):
        raise _fail(spec, f"the factory returned {type(model).__name__}, not a torch.nn.Module")
    try:
        check_model(model)
    except ParameterError as e:
        raise _fail(spec, e.message) from None
    if not any(p.requires_grad for p in model.parameters()):
        raise _fail(spec, "the model has no trainable parameter")
    model.train()
    for batch in PROBE_BATCHES:
        _probe_forward(spec, model, batch)
    _probe_per_example(spec, model)
    return model


#: batch sizes the forward pass is probed with: the per-example pass of DP-SGD (1), and batches of
#: several examples (evaluation, the fast path)
PROBE_BATCHES = (2, 1, 3)


def _probe_forward(spec: str, model: nn.Module, batch: int) -> None:
    """One forward pass on ``batch`` zero images in training mode, checked: it runs, leaves the
    buffers and parameters untouched and gives (batch, 10) float logits."""
    shape = f"({batch}, {', '.join(map(str, INPUT_SHAPE))})"
    probe = torch.zeros((batch, *INPUT_SHAPE))
    versions = [b._version for b in model.buffers()]
    params = [p._version for p in model.parameters()]
    try:
        with torch.no_grad():
            out = model(probe)
    except Exception as e:
        raise _fail(spec, f"the model failed on a {shape} batch of images: {_one_line(e)}") from None
    if [b._version for b in model.buffers()] != versions:
        raise _fail(spec, "the model changes its buffers in training mode (running statistics of "
                          "the data would be released without privacy)")
    if [p._version for p in model.parameters()] != params:
        raise _fail(spec, "the model changes its parameters in forward (an update of the weights from the data "
                          "outside DP-SGD's clipped, noised step would be released without privacy)")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (batch, NUM_CLASSES) or not out.is_floating_point():
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise _fail(spec, f"the model must map a {shape} batch to ({batch}, {NUM_CLASSES}) float logits, "
                          f"got {got}")


def _probe_per_example(spec: str, model: nn.Module) -> None:
    """Each example's gradient as DP-SGD computes it for a custom forward (``torch.func``:
    ``functional_call`` on one example at a time under ``vmap``), on two zero images."""
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach() for n, b in model.named_buffers()}

    def example_loss(params, x, y):
        logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    x, y = torch.zeros((2, *INPUT_SHAPE)), torch.zeros(2, dtype=torch.long)
    try:
        vmap(grad(example_loss), in_dims=(None, 0, 0), randomness="different")(params, x, y)
    except Exception as e:
        raise _fail(spec, "per-example gradients (torch.func, one example at a time, as DP-SGD needs them) "
                          f"failed: {_one_line(e)}") from None
