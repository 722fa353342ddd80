"""`--where`: a small filter language over a results table, evaluated without running any code.

    dtype == 'float16' and status != 'ok'
    n_timesteps >= 16 and not (library in ['native'] or scaling == "dynamic")
    grad_params_rel_err_over_u > 2.5

A filter is column names, numbers, quoted strings, true/false/none, the comparisons == != < <= > >=
(chains such as `4 <= n_timesteps < 64` too), `in` / `not in` a bracketed list, and `and`, `or`, `not`
with parentheses. The text is parsed with Python's `ast` and only those nodes are accepted; anything
else (a call, an attribute, an `@` variable, arithmetic) is refused before anything is evaluated.
"""

from __future__ import annotations

import ast
import operator

import pandas as pd

from ..core.errors import InputError
from ..core.text import printable

MAX_LENGTH = 2000
LANGUAGE = (
    "columns, numbers, 'strings', true/false/none, == != < <= > >=, in [..], not in [..], and, or, not, parentheses"
)
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_NAMED_CONSTANTS = {"true": True, "false": False, "none": None, "True": True, "False": False, "None": None}


class _Refused(Exception):
    pass


def select(table: pd.DataFrame, where: str) -> pd.DataFrame:
    """The rows of `table` for which `where` holds; a filter outside the language is an InputError."""
    shown = printable(where)
    if len(where) > MAX_LENGTH:
        raise InputError(f"--where is {len(where)} characters long; at most {MAX_LENGTH}")
    try:
        tree = ast.parse(where.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else "it does not parse"
        raise InputError(f"--where '{shown}' is not a filter ({reason}); a filter uses {LANGUAGE}") from None
    try:
        mask = _condition(tree.body, table)
    except _Refused as exc:
        raise InputError(f"--where '{shown}': {exc}; a filter uses {LANGUAGE}") from None
    except RecursionError:
        raise InputError(f"--where '{shown}' nests too deeply") from None
    except TypeError as exc:
        raise InputError(
            f"--where '{shown}' compares values of different kinds ({printable(exc)}); quote strings, not numbers"
        ) from None
    return table[mask]


def _condition(node: ast.AST, table: pd.DataFrame) -> pd.Series:
    if isinstance(node, ast.BoolOp):
        parts = [_condition(value, table) for value in node.values]
        combined = parts[0]
        for part in parts[1:]:
            combined = (combined & part) if isinstance(node.op, ast.And) else (combined | part)
        return combined
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ~_condition(node.operand, table)
    if isinstance(node, ast.Compare):
        mask = pd.Series(True, index=table.index)
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            mask &= _compare(op, left, right, table)
            left = right
        return mask
    if isinstance(node, ast.Name):  # a true/false column on its own
        values = _value(node, table)
        if isinstance(values, pd.Series) and values.dtype == bool:
            return values
        raise _Refused(f"'{node.id}' alone is not a condition; compare it, such as {node.id} == ...")
    raise _Refused(f"{_what(node)} is not part of the filter language")


def _compare(op: ast.cmpop, left: ast.AST, right: ast.AST, table: pd.DataFrame) -> pd.Series:
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            raise _Refused("'in' takes a bracketed list, such as dtype in ['float16', 'bfloat16']")
        values = _value(left, table)
        if not isinstance(values, pd.Series):
            raise _Refused("the left of 'in' must be a column")
        mask = values.isin([_constant(item) for item in right.elts])
        return ~mask if isinstance(op, ast.NotIn) else mask
    if type(op) not in _COMPARE:
        raise _Refused(f"'{_what(op)}' is not a comparison of the filter language")
    a, b = _value(left, table), _value(right, table)
    if (a is None or b is None) and isinstance(op, (ast.Eq, ast.NotEq)):  # `failure_class == none`: the cell is empty
        column = b if a is None else a
        if isinstance(column, pd.Series):
            return column.isna() if isinstance(op, ast.Eq) else column.notna()
    result = _COMPARE[type(op)](a, b)
    if not isinstance(result, pd.Series):  # two constants: the same answer for every row
        result = pd.Series(bool(result), index=table.index)
    return result.fillna(False).astype(bool) if result.dtype != bool else result


def _value(node: ast.AST, table: pd.DataFrame):
    if isinstance(node, ast.Name):
        if node.id in _NAMED_CONSTANTS:
            return _NAMED_CONSTANTS[node.id]
        if node.id not in table.columns:
            raise _Refused(f"no column '{node.id}' (columns: {', '.join(map(str, table.columns))})")
        return table[node.id]
    return _constant(node)


def _constant(node: ast.AST):
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int, float, str))):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, ast.Name) and node.id in _NAMED_CONSTANTS:
        return _NAMED_CONSTANTS[node.id]
    raise _Refused(f"{_what(node)} is not a column, number or quoted string")


def _what(node: ast.AST) -> str:
    names = {
        ast.Call: "a call",
        ast.Attribute: "an attribute",
        ast.Subscript: "a subscript",
        ast.BinOp: "arithmetic",
        ast.Lambda: "a lambda",
        ast.Is: "is",
        ast.IsNot: "is not",
    }
    return names.get(type(node), type(node).__name__)
