"""Which torch calls autocast runs in the low dtype, which it runs in float32, and which only move values.

The two autocast lists are torch's own (aten/src/ATen/autocast_mode.cpp, torch 2.x), by device type;
an op in neither list runs in the dtype its inputs promote to.
"""

from __future__ import annotations

_LOW_COMMON = {
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "_convolution",
    "prelu",
    "addmm",
    "addbmm",
    "baddbmm",
    "bmm",
    "mm",
    "matmul",
    "linear",
    "linalg_vecdot",
    "scaled_dot_product_attention",
}
LOW_PRECISION_OPS = {
    "cpu": _LOW_COMMON,
    "cuda": _LOW_COMMON
    | {
        "addmv",
        "addr",
        "einsum",
        "mv",
        "chain_matmul",
        "multi_dot",
        "linalg_multi_dot",
        "lstm_cell",
        "gru_cell",
        "rnn_tanh_cell",
        "rnn_relu_cell",
    },
}

_FLOAT32_COMMON = {
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cdist",
    "cosine_embedding_loss",
    "cross_entropy",
    "ctc_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "margin_ranking_loss",
    "mse_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "nll_loss",
    "poisson_nll_loss",
    "prod",
    "smooth_l1_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
}
FLOAT32_OPS = {
    "cpu": _FLOAT32_COMMON
    | {
        "trace",
        "quantile",
        "nanquantile",
        "stft",
        "polar",
        "cholesky",
        "inverse",
        "pinverse",
        "grid_sampler",
        "avg_pool3d",
        "max_pool3d",
        "adaptive_avg_pool3d",
    },
    "cuda": _FLOAT32_COMMON
    | {
        "acos",
        "asin",
        "cosh",
        "erfinv",
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "reciprocal",
        "rsqrt",
        "sinh",
        "tan",
        "pow",
        "softplus",
        "layer_norm",
        "group_norm",
        "norm",
        "cosine_similarity",
        "dist",
        "pdist",
        "renorm",
        "logsumexp",
        "cumsum",
        "cumprod",
        "sum",
        "softmax",
        "log_softmax",
    },
}

# Calls whose result holds the same numbers as their input (views, copies, gathers, sign changes):
# a low-precision input gives a low-precision result with nothing to round.
VALUE_PRESERVING = {
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "t",
    "transpose",
    "permute",
    "mT",
    "expand",
    "expand_as",
    "contiguous",
    "clone",
    "detach",
    "__getitem__",
    "select",
    "narrow",
    "split",
    "chunk",
    "unbind",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "flip",
    "roll",
    "repeat",
    "tile",
    "index_select",
    "gather",
    "movedim",
    "neg",
    "__neg__",
    "abs",
    "__abs__",
    "positive",
    "__pos__",
    "relu",
    "requires_grad_",
    "diagonal",
    "tril",
    "triu",
}

# Casts: what comes out is in the dtype asked for, whatever went in.
CASTS = {"to", "type", "float", "double", "half", "bfloat16", "type_as"}

# Calls that never produce floating-point values worth a look (metadata, comparisons, creation).
IGNORED = {
    "__get__",
    "__set__",
    "dim",
    "size",
    "numel",
    "stride",
    "data_ptr",
    "is_floating_point",
    "__len__",
    "__bool__",
    "__format__",
    "__repr__",
    "item",
    "tolist",
    "numpy",
    "__hash__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "isfinite",
    "isnan",
    "isinf",
    "all",
    "any",
    "backward",
    "register_hook",
    "copy_",
    "zero_",
    "fill_",
    "__setitem__",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "_has_compatible_shallow_copy_type",
    "__reduce_ex__",
    "__deepcopy__",
}


_REFLECTED = {
    "__radd__",
    "__rsub__",
    "__rmul__",
    "__rtruediv__",
    "__rdiv__",
    "__rpow__",
    "__rmatmul__",
    "__rfloordiv__",
}
_IN_PLACE = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__idiv__", "__ipow__", "__imatmul__"}


def op_name(func) -> str:
    """`torch.mul`, `Tensor.__rmul__` and `Tensor.__mul__` all name one op; in-place ones end in `_`."""
    name = getattr(func, "__name__", "")
    if name in _REFLECTED:
        return name[3:-2]
    if name in _IN_PLACE:
        return name[3:-2] + "_"
    if name.startswith("__") and name.endswith("__") and name not in VALUE_PRESERVING | IGNORED:
        return name[2:-2]
    return name
