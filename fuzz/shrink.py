"""Reducing a failing query: greedy, on its sqlglot AST, while the same kind of failure persists.

Each step tries the candidates of the current query, largest reductions first (nodes near the
root come first in a breadth-first walk), and keeps the first one that still fails the same way:
drop a conjunct or disjunct, a NOT, WHERE, HAVING, a join, a CTE, a set operation's side, a
projection, a GROUP BY item, DISTINCT, ORDER BY (with its LIMIT), LIMIT, OFFSET, an IN list item;
replace an expression by one of its operands, a CASE by a branch, a CAST by its operand, a join
by an inner join. Then it starts again from the smaller query, until no candidate reproduces or
the budget is spent.

What is never touched, because the answer would stop being determined and a "reproduction"
could be noise: single ORDER BY items (a LIMIT needs the total order), window ORDER BY lists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import sqlglot
from sqlglot import exp

Check = Callable[[str, bool], bool]  # (query template, compare in order) -> still fails the same way


def parse(template: str) -> exp.Expression | None:
    try:
        return sqlglot.parse_one(template, read="spark")
    except Exception:  # noqa: BLE001 - a query sqlglot cannot parse is reported unshrunk
        return None


def render(tree: exp.Expression) -> str:
    return tree.sql(dialect="spark")


def top_ordered(tree: exp.Expression) -> bool:
    return tree.args.get("order") is not None


def shrink(template: str, ordered: bool, check: Check, budget_s: float = 180, max_tries: int = 200) -> tuple[str, int]:
    """The smallest variant of `template` found that `check` still accepts (the template itself
    when none, or when sqlglot's rendering of it does not reproduce); and the number of runs."""
    tree = parse(template)
    if tree is None:
        return template, 0
    deadline = time.monotonic() + budget_s
    tries = 0
    current = render(tree)
    if current != template:
        tries += 1
        if not check(current, ordered and top_ordered(tree)):
            return template, tries
    tried = {current}
    improved = True
    while improved and tries < max_tries and time.monotonic() < deadline:
        improved = False
        for cand in candidates(tree):
            try:
                text = render(cand)
            except Exception:  # noqa: BLE001 - an AST edit sqlglot cannot render is skipped
                continue
            if text in tried or len(text) >= len(current):
                continue
            tried.add(text)
            tries += 1
            if check(text, ordered and top_ordered(cand)):
                tree, current, improved = cand, text, True
                break
            if tries >= max_tries or time.monotonic() >= deadline:
                break
    return current, tries


def _edits(node: exp.Expression) -> list[Callable[[exp.Expression], None]]:
    """The edits of one node; each takes the node's counterpart in a copy of the tree."""
    out: list[Callable[[exp.Expression], None]] = []

    def replace_by(getter):
        def f(n):
            child = getter(n)
            if child is not None:
                return n.replace(child.copy())
            return None
        return f

    if isinstance(node, (exp.And, exp.Or)):
        out += [replace_by(lambda n: n.left), replace_by(lambda n: n.right)]
    elif isinstance(node, (exp.Not, exp.Paren)):
        out.append(replace_by(lambda n: n.this))
    elif isinstance(node, exp.SetOperation):
        out += [replace_by(lambda n: n.left), replace_by(lambda n: n.right)]
    elif isinstance(node, exp.Case):
        out.append(replace_by(lambda n: n.args.get("default")))
        out.append(replace_by(lambda n: n.args["ifs"][0].args.get("true") if n.args.get("ifs") else None))
    elif isinstance(node, (exp.Cast, exp.TryCast)):
        if not isinstance(node.this, (exp.Literal, exp.Null)):  # a typed literal stays typed
            out.append(replace_by(lambda n: n.this))
    elif isinstance(node, exp.Join):
        out.append(lambda n: n.pop())
        if node.args.get("side") or node.args.get("kind"):
            out.append(_inner)
    elif isinstance(node, (exp.Where, exp.Having, exp.Limit, exp.Offset)):
        out.append(lambda n: n.pop())
    elif isinstance(node, exp.Order) and not isinstance(node.parent, exp.Window):
        out.append(_drop_order)
    elif isinstance(node, exp.With):
        for i in range(len(node.expressions)):
            out.append(lambda n, i=i: n.expressions[i].pop())
    elif isinstance(node, exp.In) and node.args.get("expressions") and len(node.expressions) > 1:
        for i in range(len(node.expressions)):
            out.append(lambda n, i=i: n.expressions[i].pop())
    elif isinstance(node, exp.Group):
        for i in range(len(node.expressions)):
            out.append(lambda n, i=i: n.expressions[i].pop())
    elif isinstance(node, (exp.Func, exp.Binary, exp.Neg)) and not isinstance(
        node, (exp.Predicate, exp.Window, exp.AggFunc)
    ):
        kids = [k for k in node.iter_expressions() if isinstance(k, exp.Expression) and not isinstance(k, exp.DataType)]
        for i in range(len(kids)):
            out.append(lambda n, i=i: _replace_by_operand(n, i))
    if isinstance(node, exp.Select):
        if node.args.get("distinct"):
            out.append(lambda n: n.set("distinct", None))
        if len(node.expressions) > 1:
            for i in range(len(node.expressions)):
                out.append(lambda n, i=i: _drop_projection(n, i))
    return out


def _inner(n: exp.Join) -> None:
    n.set("side", None)
    n.set("kind", None)


def _drop_order(n: exp.Order) -> None:
    """ORDER BY goes with the LIMIT and OFFSET it determines."""
    select = n.parent
    n.pop()
    if select is not None:
        for arg in ("limit", "offset"):
            if select.args.get(arg) is not None:
                select.args[arg].pop()


def _drop_projection(select: exp.Select, i: int) -> None:
    """Drop output column i; an ORDER BY of every ordinal loses its last one (still total)."""
    select.expressions[i].pop()
    order = select.args.get("order")
    if order is not None and order.expressions and all(
        isinstance(o.this, exp.Literal) and o.this.is_int for o in order.expressions
    ):
        n = len(select.expressions)
        for o in list(order.expressions):
            if int(o.this.name) > n:
                o.pop()


def _replace_by_operand(n: exp.Expression, i: int) -> exp.Expression | None:
    kids = [k for k in n.iter_expressions() if isinstance(k, exp.Expression) and not isinstance(k, exp.DataType)]
    return n.replace(kids[i].copy()) if i < len(kids) else None


def candidates(tree: exp.Expression) -> Iterator[exp.Expression]:
    """Smaller variants of `tree`, roughly largest reductions first."""
    nodes = list(tree.bfs())
    for idx, node in enumerate(nodes):
        for edit in _edits(node):
            copy = tree.copy()
            target = list(copy.bfs())[idx]
            try:
                new = edit(target)
            except Exception:  # noqa: BLE001 - an edit that does not apply is skipped
                continue
            # Replacing the root cannot happen in place: the edit returns the new root then.
            yield new if target is copy and isinstance(new, exp.Expression) else copy
