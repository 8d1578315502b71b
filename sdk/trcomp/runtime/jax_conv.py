"""Convolution and pooling fixes for torchax 0.0.13 (the jax engine's backward pass).

Without them a CNN trains wrong without any error: ``torchax.Tensor.flatten``
reshapes the JAX array itself and returns a tensor with no autograd history,
so ``nn.Flatten`` cuts the graph and every layer before it gets no gradient
(AdamW skips those parameters; only the head trains). With the cut removed the
backward pass reaches operators torchax cannot differentiate:

- ``aten.convolution_backward`` has no lowering;
- ``F.max_pool2d`` is lowered above autograd (no ``grad_fn``), and the
  ``max_pool2d_with_indices_backward`` lowering below it is wrong: it ignores
  the indices and, in a Python loop over the output, adds each output
  gradient over a whole window, indexing the batch and channel axes as if
  they were the spatial ones; ``max_pool3d_with_indices_backward`` has none;
- ``avg_pool{2,3}d_backward`` and ``_adaptive_avg_pool{2,3}d_backward`` have
  no lowering;
- the forward transposed convolution with ``groups > 1`` lays the weight out
  wrongly (its output differs from eager).

Each backward here is the exact derivative of the forward lowering the step
runs: ``jax.vjp`` of torchax's own convolution and average-pooling lowerings,
and for max pooling a scatter-add of the output gradient at the forward's
indices (what torch's kernel does). :mod:`trcomp.runtime.jax_env` installs them
(its ``ENVIRONMENT_WORKAROUNDS``); tests/sdk/runtime/test_jax_conv.py pins each.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch
from torchax import interop
from torchax import tensor as tx_tensor

__all__ = [
    "add_convolution_backward",
    "fix_avg_pool_backward",
    "fix_grouped_transposed_convolution",
    "fix_max_pool_backward",
    "keep_flatten_in_autograd",
    "keep_max_pool_in_autograd",
]

aten = torch.ops.aten


def _lowering(env: tx_tensor.Environment, op: Any) -> Callable[..., Any]:
    """torchax's JAX function for ``op`` (the forward whose derivative is wanted)."""
    found = env._get_op_or_decomp(op)
    if not found.is_jax_function:
        raise RuntimeError(
            f"torchax lowers {op} in torch, not JAX, so trcomp cannot take its derivative; "
            "this torchax version differs from the tested 0.0.13: install torchax==0.0.13."
        )
    return found.func  # type: ignore[no-any-return]


def _override(env: tx_tensor.Environment, op: Any, jax_fn: Callable[..., Any]) -> None:
    env.override_op_definition(op, functools.partial(interop.call_jax, jax_fn))


def keep_flatten_in_autograd(env: tx_tensor.Environment) -> None:
    """Drop torchax's ``Tensor.flatten``: torch's own flatten is a view autograd records."""
    if "flatten" in vars(tx_tensor.Tensor):
        delattr(tx_tensor.Tensor, "flatten")


# -- convolution -----------------------------------------------------------------------


def _grouped_transposed(
    input: jax.Array,
    weight: jax.Array,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
) -> jax.Array:
    # torch's weight is (in, out // groups, *kernel); XLA's grouped kernel wants
    # (out, in // groups, *kernel), flipped, over an input dilated by the stride.
    n = weight.ndim - 2
    cin, cout_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    rhs = weight.reshape(groups, cin // groups, cout_g, *kernel).swapaxes(1, 2)
    rhs = jnp.flip(rhs.reshape(groups * cout_g, cin // groups, *kernel), tuple(range(2, 2 + n)))
    pads = []
    for i in range(n):
        front = dilation[i] * (kernel[i] - 1) - padding[i]
        pads.append((front, front + output_padding[i]))
    spec = tuple(range(n + 2))
    return jax.lax.conv_general_dilated(
        input,
        rhs,
        (1,) * n,
        pads,
        lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation),
        dimension_numbers=jax.lax.ConvDimensionNumbers(spec, spec, spec),
        feature_group_count=groups,
    )


def _convolution(env: tx_tensor.Environment) -> Callable[..., jax.Array]:
    """torchax's convolution lowering, with grouped transposed convolutions computed right."""
    # The packet, not ``.default``: trcomp's own override sits on ``.default``.
    torchax_forward = _lowering(env, aten.convolution)

    def forward(
        input: jax.Array,
        weight: jax.Array,
        bias: jax.Array | None,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        transposed: bool,
        output_padding: Sequence[int],
        groups: int,
    ) -> jax.Array:
        if not transposed or groups == 1:
            return torchax_forward(  # type: ignore[no-any-return]
                input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
            )
        unbatched = input.ndim == weight.ndim - 1
        x = input[None] if unbatched else input
        n = weight.ndim - 2
        stride, padding, dilation, output_padding = (
            list(v) * n if len(v) == 1 else list(v)
            for v in (stride, padding, dilation, output_padding)
        )
        out = _grouped_transposed(x, weight, stride, padding, dilation, output_padding, groups)
        if bias is not None:
            out = out + bias.reshape((1, -1) + (1,) * n)
        return out[0] if unbatched else out

    return forward


def fix_grouped_transposed_convolution(env: tx_tensor.Environment) -> None:
    """Transposed convolutions with ``groups > 1``: torchax's output differs from eager."""
    _override(env, aten.convolution.default, _convolution(env))


def add_convolution_backward(env: tx_tensor.Environment) -> None:
    """``aten.convolution_backward``, which torchax lacks: the VJP of the forward lowering."""
    forward = _convolution(env)

    def backward(
        grad_output: jax.Array,
        input: jax.Array,
        weight: jax.Array,
        bias_sizes: Any,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        transposed: bool,
        output_padding: Sequence[int],
        groups: int,
        output_mask: Sequence[bool],
    ) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None]:
        def conv(x: jax.Array, w: jax.Array) -> jax.Array:
            return forward(
                x, w, None, stride, padding, dilation, transposed, output_padding, groups
            )

        _, vjp = jax.vjp(conv, input, weight)
        grad_input, grad_weight = vjp(grad_output.astype(input.dtype))
        grad_bias = None
        if output_mask[2]:
            channel = 1 if grad_output.ndim == weight.ndim else 0
            other = tuple(d for d in range(grad_output.ndim) if d != channel)
            grad_bias = grad_output.sum(axis=other)
        return (
            grad_input if output_mask[0] else None,
            grad_weight if output_mask[1] else None,
            grad_bias,
        )

    _override(env, aten.convolution_backward.default, backward)


# -- pooling ---------------------------------------------------------------------------


def _max_pool_backward(
    spatial: int,
    grad_output: jax.Array,
    input: jax.Array,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    indices: jax.Array,
) -> jax.Array:
    # indices number each plane's input positions; several windows may pick one.
    rows = math.prod(grad_output.shape[:-spatial])
    grad = grad_output.reshape(rows, -1)
    where = indices.reshape(rows, -1)
    plane = math.prod(input.shape[-spatial:])
    out = jnp.zeros((rows, plane), grad_output.dtype)
    out = out.at[jnp.arange(rows)[:, None], where].add(grad)
    return out.reshape(input.shape)


def keep_max_pool_in_autograd(env: tx_tensor.Environment) -> None:
    """Drop torchax's ``F.max_pool2d`` lowering, which runs above autograd (no ``grad_fn``)."""
    env._ops.pop(torch.nn.functional.max_pool2d, None)


def fix_max_pool_backward(env: tx_tensor.Environment) -> None:
    """Max pooling's backward from the forward's indices (torchax's adds to whole windows)."""
    for op, spatial in (
        (aten.max_pool2d_with_indices_backward.default, 2),
        (aten.max_pool3d_with_indices_backward.default, 3),
    ):
        _override(env, op, functools.partial(_max_pool_backward, spatial))


def _vjp_backward(forward: Callable[..., Any]) -> Callable[..., jax.Array]:
    def backward(grad_output: jax.Array, input: jax.Array, *args: Any) -> jax.Array:
        _, vjp = jax.vjp(lambda x: forward(x, *args), input)
        return vjp(grad_output.astype(input.dtype))[0]  # type: ignore[no-any-return]

    return backward


def _adaptive_backward(forward: Callable[..., Any], spatial: int) -> Callable[..., jax.Array]:
    def backward(grad_output: jax.Array, input: jax.Array) -> jax.Array:
        size = list(grad_output.shape[-spatial:])
        _, vjp = jax.vjp(lambda x: forward(x, size), input)
        return vjp(grad_output.astype(input.dtype))[0]  # type: ignore[no-any-return]

    return backward


def fix_avg_pool_backward(env: tx_tensor.Environment) -> None:
    """Average pooling's backward (plain and adaptive, 1-3d): the VJP of its forward."""
    for forward_op, backward_op in (
        (aten.avg_pool2d.default, aten.avg_pool2d_backward.default),
        (aten.avg_pool3d.default, aten.avg_pool3d_backward.default),
    ):
        _override(env, backward_op, _vjp_backward(_lowering(env, forward_op)))
    for forward_op, backward_op, spatial in (
        (aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d_backward.default, 2),
        (aten._adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d_backward.default, 3),
    ):
        _override(env, backward_op, _adaptive_backward(_lowering(env, forward_op), spatial))
