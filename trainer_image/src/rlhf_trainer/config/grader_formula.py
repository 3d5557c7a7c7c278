"""A multi grader's `calculate_output`: arithmetic over the sub-graders' names, parsed with
Python's own parser and then walked through a whitelist, never `eval`.

Allowed: numbers, the sub-graders' names, `+ - * /`, `^` or `**` (power), unary `+ -`,
parentheses, and calls of `min max abs floor ceil exp sqrt log` with positional arguments.
Anything else (attributes, subscripts, strings, comparisons, lambdas, other names or calls)
is refused with what was found. Evaluation is in floats, so a huge power overflows at once
instead of building a huge integer. Pure.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Collection, Mapping

MAX_NODES = 256

FUNCTIONS: dict[str, tuple[Callable[..., float], int, int | None]] = {
    # name: (function, least arguments, most arguments)
    "min": (min, 1, None),
    "max": (max, 1, None),
    "abs": (abs, 1, 1),
    "floor": (lambda x: float(math.floor(x)), 1, 1),
    "ceil": (lambda x: float(math.ceil(x)), 1, 1),
    "exp": (math.exp, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "log": (math.log, 1, 2),
}
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


class FormulaError(ValueError):
    """calculate_output does not parse, uses something not allowed, or fails to evaluate."""


def parse_formula(text: str, names: Collection[str]) -> ast.expr:
    """The checked expression tree; raises FormulaError saying what is not allowed."""
    source = text.replace("^", "**")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        detail = getattr(err, "msg", None) or str(err) or type(err).__name__
        raise FormulaError(f"does not parse: {detail}") from None
    nodes = list(ast.walk(tree.body))
    if len(nodes) > MAX_NODES:
        raise FormulaError(f"has {len(nodes)} parts; at most {MAX_NODES} are allowed")
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for node in nodes:
        if id(node) not in called:
            _check(node, names)
    return tree.body


def _check(node: ast.AST, names: Collection[str]) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise FormulaError(f"only numbers are allowed as constants, not {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id not in names:
            known = ", ".join(sorted(names)) or "none"
            raise FormulaError(f"unknown name {node.id!r} (the sub-graders are: {known})")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            # (a called name is checked here, not as a variable)
            raise FormulaError(f"only {', '.join(FUNCTIONS)} may be called")
        if node.keywords:
            raise FormulaError(f"{node.func.id}() takes positional arguments only")
        _, least, most = FUNCTIONS[node.func.id]
        if len(node.args) < least or (most is not None and len(node.args) > most):
            raise FormulaError(f"{node.func.id}() takes {least}..{most or 'any'} arguments")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise FormulaError("* arguments are not allowed")
    elif not isinstance(node, ast.Load | ast.operator | ast.unaryop):
        raise FormulaError(f"{type(node).__name__} is not allowed (arithmetic only)")


def evaluate_formula(text: str, values: Mapping[str, float]) -> float:
    """calculate_output with each sub-grader's score; raises FormulaError."""
    tree = parse_formula(text, set(values))
    try:
        result = _eval(tree, values)
    except (ArithmeticError, ValueError, TypeError) as err:
        raise FormulaError(f"cannot be evaluated: {err or type(err).__name__}") from None
    if not math.isfinite(result):
        raise FormulaError(f"evaluates to {result}")
    return result


def _eval(node: ast.expr, values: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(values[node.id])
    if isinstance(node, ast.BinOp):
        result = _BINARY[type(node.op)](_eval(node.left, values), _eval(node.right, values))
        if isinstance(result, complex):
            raise ValueError("a negative number to a fractional power is not a real number")
        return float(result)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, values))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        func = FUNCTIONS[node.func.id][0]
        return float(func(*(_eval(a, values) for a in node.args)))
    raise FormulaError(f"{type(node).__name__} is not allowed")
