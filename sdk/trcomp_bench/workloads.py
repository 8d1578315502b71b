"""Reference workloads: models built from configs with random weights, data made in code.

Every workload is a *factory*: ``factory(batch_size) -> (model, batch_fn)``.
``batch_fn(step)`` returns the batch for that step (a tuple of tensors, passed
as ``model(*batch)``, or a dict, passed as ``model(**batch)``) on the CPU, the
same in every process because it is drawn from a generator seeded by the step.
The model's output is the loss: a scalar tensor, an object with ``.loss``
(Hugging Face models) or a mapping with a ``"loss"`` key.

A user's own model follows the same contract and is named ``module:factory``
or ``path/to/file.py:factory`` (see :func:`load_factory`).

Dropout is off everywhere: the compilers draw a different random stream, and
the benchmark compares losses against eager step by step.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "SIZES",
    "WORKLOADS",
    "BatchFn",
    "Factory",
    "Workload",
    "get_workload",
    "load_factory",
    "loss_of",
]

BatchFn = Callable[[int], Any]
Factory = Callable[[int], "tuple[torch.nn.Module, BatchFn]"]

# "tiny" keeps tests fast; "small" is what `make bench` measures.
SIZES = ("tiny", "small")


@dataclass(frozen=True)
class Workload:
    """A named reference workload.

    ``build(batch_size, size)`` returns ``(model, batch_fn)``; ``default_batch_size``
    is what the benchmark uses unless told otherwise.
    """

    name: str
    description: str
    build: Callable[[int, str], tuple[Any, BatchFn]]
    default_batch_size: int

    def factory(self, size: str = "small") -> Factory:
        """This workload at ``size`` as a one-argument factory."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}: use one of {', '.join(SIZES)}")
        return lambda batch_size: self.build(batch_size, size)


def _generator(step: int, seed: int = 1234) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed + step)


def _pick(size: str, tiny: Any, small: Any) -> Any:
    return tiny if size == "tiny" else small


def _gpt2(batch_size: int, size: str) -> tuple[Any, BatchFn]:
    layers, width, vocab, seq = _pick(size, (1, 32, 256, 16), (2, 128, 2048, 64))
    return _gpt2_model(batch_size, layers, width, vocab, seq)


def _gpt2_layers(layers: int) -> Callable[[int, str], tuple[Any, BatchFn]]:
    """GPT-2 with ``layers`` blocks, trained as HF Trainer does (no KV cache).

    For the regional-compilation rows: with the cache on, each block updates its own
    layer of the cache, so dynamo compiles every block apart and nothing is reused.
    """

    def build(batch_size: int, size: str) -> tuple[Any, BatchFn]:
        width, vocab, seq = _pick(size, (32, 256, 16), (64, 1024, 64))
        return _gpt2_model(batch_size, layers, width, vocab, seq, use_cache=False)

    return build


def _gpt2_model(
    batch_size: int, layers: int, width: int, vocab: int, seq: int, *, use_cache: bool = True
) -> tuple[Any, BatchFn]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        use_cache=use_cache,
        n_layer=layers,
        n_head=4,
        n_embd=width,
        vocab_size=vocab,
        n_positions=seq,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
    )
    model = GPT2LMHeadModel(config)

    def batch(step: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, vocab, (batch_size, seq), generator=_generator(step))
        return {"input_ids": ids, "labels": ids}

    return model, batch


def _bert(batch_size: int, size: str) -> tuple[Any, BatchFn]:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    layers, width, vocab, seq = _pick(size, (1, 32, 256, 16), (2, 128, 2048, 64))
    config = BertConfig(
        num_hidden_layers=layers,
        hidden_size=width,
        num_attention_heads=4,
        intermediate_size=4 * width,
        vocab_size=vocab,
        max_position_embeddings=seq,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        classifier_dropout=0.0,
    )
    config.num_labels = 2
    model = BertForSequenceClassification(config)

    def batch(step: int) -> dict[str, torch.Tensor]:
        gen = _generator(step)
        ids = torch.randint(0, vocab, (batch_size, seq), generator=gen)
        labels = torch.randint(0, 2, (batch_size,), generator=gen)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    return model, batch


def _classifier(body: Any) -> Any:
    """Wrap ``body`` so that ``model(x, y)`` returns the cross-entropy loss."""
    from trcomp_bench.models import ClassifierLoss

    return ClassifierLoss(body)


def _mlp(batch_size: int, size: str) -> tuple[Any, BatchFn]:
    import torch
    from torch import nn

    features, hidden = _pick(size, (32, 64), (512, 1024))
    body = nn.Sequential(
        nn.Linear(features, hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.LayerNorm(hidden), nn.Linear(hidden, 10),
    )  # fmt: skip

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = _generator(step)
        x = torch.randn(batch_size, features, generator=gen)
        return x, torch.randint(0, 10, (batch_size,), generator=gen)

    return _classifier(body), batch


def _cnn(batch_size: int, size: str) -> tuple[Any, BatchFn]:
    import torch
    from torch import nn

    channels, pixels = _pick(size, (8, 16), (32, 32))
    body = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, 10),
    )  # fmt: skip

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = _generator(step)
        x = torch.randn(batch_size, 3, pixels, pixels, generator=gen)
        return x, torch.randint(0, 10, (batch_size,), generator=gen)

    return _classifier(body), batch


_DEMO_MODULE = "trcomp_demo_tiny_lm"
_DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tiny_lm" / "train.py"


def _tiny_lm(batch_size: int, size: str) -> tuple[Any, BatchFn]:
    """The demo job's model (docs/examples/tiny_lm) at the demo's shape, on the demo's data.

    Both sizes are the demo's: 2 layers, width 64, 4 heads, 32 tokens, vocabulary 64.
    """
    import torch

    from trcomp_bench.models import NextTokenLoss

    if not _DEMO_SCRIPT.is_file():
        raise ValueError(f"the tiny_lm workload needs a trcomp checkout: {_DEMO_SCRIPT} is missing")
    demo = sys.modules.get(_DEMO_MODULE)
    if demo is None:  # registered, so that an AOT artifact can refer to TinyLM by name
        module_spec = importlib.util.spec_from_file_location(_DEMO_MODULE, _DEMO_SCRIPT)
        assert module_spec is not None and module_spec.loader is not None
        demo = importlib.util.module_from_spec(module_spec)
        sys.modules[_DEMO_MODULE] = demo
        module_spec.loader.exec_module(demo)
    vocab, seq_len = 64, 32
    body = demo.TinyLM(vocab, 64, 2, 4, seq_len)

    def batch(step: int) -> tuple[torch.Tensor]:
        gen = _generator(step)  # the demo's data: rows counting up by a stride, mod vocab
        start = torch.randint(0, vocab, (batch_size, 1), generator=gen)
        stride = torch.randint(1, 5, (batch_size, 1), generator=gen)
        return ((start + stride * torch.arange(seq_len + 1)) % vocab,)

    return NextTokenLoss(body, vocab), batch


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("gpt2", "GPT-2-style causal LM (transformers, random init)", _gpt2, 8),
        Workload("bert", "BERT-style sequence classifier (transformers)", _bert, 8),
        Workload("mlp", "plain PyTorch MLP classifier", _mlp, 64),
        Workload("cnn", "plain PyTorch CNN classifier (conv, batch norm)", _cnn, 32),
        Workload("gpt2-2l", "GPT-2 with 2 blocks, no KV cache (regional rows)", _gpt2_layers(2), 8),
        Workload("gpt2-8l", "GPT-2 with 8 blocks, no KV cache (regional rows)", _gpt2_layers(8), 8),
        Workload("tiny_lm", "the demo job's model (docs/examples/tiny_lm)", _tiny_lm, 8),
    )
}


def get_workload(name: str) -> Workload:
    """The reference workload called ``name``; the error lists the known names."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(
            f"unknown workload {name!r}: use one of {', '.join(WORKLOADS)} "
            "or your own model as --model module:factory"
        ) from None


def load_factory(spec: str) -> Factory:
    """Import a user's ``module:factory`` or ``path/to/file.py:factory``.

    ``factory(batch_size)`` must return ``(model, batch_fn)`` as described in
    this module's docstring.
    """
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(
            f"--model {spec!r} is not module:factory: write e.g. mypkg.models:make "
            "or ./train.py:make"
        )
    if target.endswith(".py"):
        path = Path(target).resolve()
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"cannot import {path}: is it a Python file?")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(path.stem, module)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"{target} has no callable {attr!r}; --model needs module:factory")
    return factory  # type: ignore[no-any-return]


def loss_of(output: Any) -> torch.Tensor:
    """The scalar loss in a model's output (tensor, ``.loss`` or ``["loss"]``)."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if loss is None:
        loss = output
    if getattr(loss, "ndim", None) != 0:
        raise TypeError(
            "the model's output must be the scalar loss, an object with .loss or a mapping "
            f"with 'loss'; got {type(output).__name__}. Wrap the model so forward returns it."
        )
    return loss  # type: ignore[no-any-return]
