"""A later evaluation of a field whose tensors were discovered from its first (field_tensors.py) may reach a tensor
that first one did not: a branch taken at a later time into a module the field closes over. The steps' products take
gradients with respect to the discovered tensors only, so such a tensor would get none, silently; the backward walks
each rebuilt step's graph and refuses instead, in one line that says to pass `params=`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .field_tensors import PASS_PARAMS, FieldTensorsUnknown


def refuse_unlisted_leaves(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> None:
    """Raise FieldTensorsUnknown where the graph of `outputs` reaches a leaf requiring grad outside `inputs`; the walk
    stops at `inputs` (a tensor computed before the solve is one: its own graph is not the step's)."""
    listed = {id(x) for x in inputs if x.grad_fn is None}
    boundary = {(id(x.grad_fn), x.output_nr) for x in inputs if x.grad_fn is not None}
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(x.grad_fn, x.output_nr) for x in outputs if x.grad_fn is not None]
    while stack:
        node, index = stack.pop()
        if node is None or (id(node), index) in boundary or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:  # a leaf's AccumulateGrad
            if id(variable) not in listed:
                raise FieldTensorsUnknown(
                    f"the vector field reached a {tuple(variable.shape)} {str(variable.dtype).removeprefix('torch.')} "
                    f"tensor requiring grad at a later evaluation that its first evaluation did not use, so the "
                    f"solver would return no gradient for it; {PASS_PARAMS}"
                )
            continue
        stack.extend(node.next_functions)
