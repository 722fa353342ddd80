"""A batch's floating-point inputs: the tensors of a batch in whatever form the data has (a tensor, a tuple such as
(inputs, targets), a dict of tensors, nested), found with torch's pytree. The sweep casts them with the run's
precision, and differentiates the loss with respect to a trajectory problem's y0 (the input gradient); other leaves
(integer labels, masks, Python numbers) pass unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree


def is_floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def floating_inputs(batch: Any) -> list[torch.Tensor]:
    """The batch's floating-point tensors, in pytree order."""
    return [leaf for leaf in pytree.tree_leaves(batch) if is_floating(leaf)]


def input_names(batch: Any, root: str) -> list[str]:
    """A name for each of `floating_inputs(batch)`: `root` for a bare tensor, `root[0]`, `root['x']` inside."""
    return [f"{root}{pytree.keystr(path)}" for path, leaf in pytree.tree_leaves_with_path(batch) if is_floating(leaf)]


def map_floating(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """The batch with `fn` applied to each floating-point tensor."""
    return pytree.tree_map(lambda leaf: fn(leaf) if is_floating(leaf) else leaf, batch)


def on_device(batch: Any, device: torch.device, dtype: torch.dtype = torch.float32) -> Any:
    """Every tensor of the batch detached on `device`, the floating-point ones in `dtype`."""

    def move(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        leaf = leaf.detach().to(device)
        return leaf.to(dtype) if leaf.is_floating_point() else leaf

    return pytree.tree_map(move, batch)


def as_leaves(batch: Any, requires_grad: bool, dtype: torch.dtype | None = None) -> Any:
    """A copy of the batch whose floating-point tensors are fresh leaves (in `dtype` if given) that require grad where
    `requires_grad` says."""

    def leaf(value: torch.Tensor) -> torch.Tensor:
        value = value.detach()
        fresh = value.to(dtype) if dtype is not None and value.dtype != dtype else value.clone()
        return fresh.requires_grad_(requires_grad)

    return map_floating(batch, leaf)


def tensors_with_names(batch: Any, root: str) -> list[tuple[str, torch.Tensor]]:
    """Every tensor of the batch (floating-point or not) with its name, as `input_names` names them."""
    return [
        (f"{root}{pytree.keystr(path)}", leaf)
        for path, leaf in pytree.tree_leaves_with_path(batch)
        if isinstance(leaf, torch.Tensor)
    ]
