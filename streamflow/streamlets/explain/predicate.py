"""A small, safe expression language for "explain the records where ...".

A user writes ``when: "alcohol > 13.5 and predicted == 2"`` in a blueprint.
That string comes from config, so it must never reach ``eval``: it is parsed
with :mod:`ast` and interpreted over a whitelist of node types (comparisons,
``and``/``or``/``not``, arithmetic, numbers, strings, tuples and field names).
Anything else is refused when the streamlet starts, with the reason.

Names are the record's fields, plus ``confidence`` (the top probability) and
``predicted`` (its class). A record missing a name does not match.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Predicate", "PredicateError"]

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


class PredicateError(ValueError):
    """An expression outside the language."""


class _Missing(Exception):
    pass


class Predicate:
    """A parsed expression; ``matches(values)`` evaluates it for one record."""

    def __init__(self, source: str) -> None:
        self.source = source
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise PredicateError(f"predicate {source!r} is not an expression: {exc.msg}") from None
        self._check(tree.body)
        self._tree = tree.body
        self.names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    def matches(self, values: Mapping[str, Any]) -> bool:
        try:
            return bool(self._eval(self._tree, values))
        except (_Missing, TypeError, ZeroDivisionError):
            return False

    def _check(self, node: ast.AST) -> None:
        allowed = (
            ast.BoolOp,
            ast.And,
            ast.Or,
            ast.UnaryOp,
            ast.Not,
            ast.USub,
            ast.Compare,
            ast.BinOp,
            ast.Name,
            ast.Load,
            ast.Constant,
            ast.Tuple,
            ast.List,
            *_COMPARE,
            *_ARITHMETIC,
        )
        for child in ast.walk(node):
            if not isinstance(child, allowed):
                raise PredicateError(
                    f"predicate {self.source!r}: {type(child).__name__} is not allowed "
                    "(use comparisons, and/or/not, arithmetic, numbers, strings and field names)"
                )

    def _eval(self, node: ast.AST, values: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if values.get(node.id) is None:
                raise _Missing(node.id)
            return values[node.id]
        if isinstance(node, ast.Tuple | ast.List):
            return tuple(self._eval(e, values) for e in node.elts)
        if isinstance(node, ast.BoolOp):
            results = (self._eval(v, values) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, values)
            return not operand if isinstance(node.op, ast.Not) else -operand
        if isinstance(node, ast.BinOp):
            arithmetic = _ARITHMETIC[type(node.op)]
            return arithmetic(self._eval(node.left, values), self._eval(node.right, values))
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, values)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self._eval(right_node, values)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        raise PredicateError(f"cannot evaluate {type(node).__name__}")  # pragma: no cover
