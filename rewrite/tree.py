"""Render a pushed tree (htap.rewrite.subplan `tree`) as one SQL query, for DuckDB or a source.

A chain of filters, projections, inner/cross joins and semi/anti joins becomes ONE flat SELECT
(`_Block`): its leaves and the other nodes below it (aggregates, outer joins, limits) as derived
tables joined in one FROM, its filters and EXISTS / NOT EXISTS in one WHERE, each tree column
(Spark's expression ids, unique in the whole query) replaced by its expression over the derived
tables' aliases. Nesting every node as a derived table instead kept targets from reordering:
DuckDB ran TPC-H Q21's EXISTS / NOT EXISTS over all of lineitem, where Spark's plan has them,
before the selective joins with nation and orders (9-12x slower than its own plan of the query).
Aggregates, sorts, limits and outer joins select from their child as a derived table. A leaf is
the scan's own rendered query (the caller's `leaf_query`). Semi and anti joins are EXISTS / NOT
EXISTS with the join's condition: Spark's null-aware anti join (NOT IN) arrives as
`a = b OR (a = b) IS NULL`, which NOT EXISTS turns into exactly SQL's NOT IN semantics.
Aggregates are cast to Spark's result type; uncorrelated scalar subqueries become `(SELECT ...)`.

Decimal division (Spark's AVG of decimals) is htap.rewrite.render.divide, the same renderer a
single table's pushed AVG uses: integer arithmetic on the unscaled values with HALF_UP rounding,
never a target's own decimal `/`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from sqlglot import exp

from htap.rewrite import render
from htap.rewrite.subplan import Expr, PushedSubplan, PushedTree, SortKey, SubplanError, TreeNode

_AGGREGATES = {"count": exp.Count, "sum": exp.Sum, "min": exp.Min, "max": exp.Max}
_OUTER_JOINS = {"left": "left", "right": "right", "full": "full"}  # the joins that stay derived tables


def render_tree(tree: PushedTree, leaf_query: Callable[[int], exp.Select]) -> exp.Select:
    """The whole tree as one query; `leaf_query(k)` is leaf k's own query (its outputs in order)."""
    return _Renderer(tree, leaf_query).query(reduce_grouped_joins(tree.root))


def reduce_grouped_joins(node: TreeNode) -> TreeNode:
    """Each inner join of an aggregate on one of its grouping columns (`g = x`) with the aggregate's
    input reduced first to the groups the join can keep: a semi join of that input with the
    smallest part of the other side that yields x (`EXISTS`). Spark decorrelates a correlated
    subquery into such a join (TPC-H Q17: the average quantity per part over all of lineitem,
    200,000 groups, joined with the 204 parts the query selects), and a target runs the aggregate
    whole before the join: DuckDB's own plan of the query text aggregates the selected parts only.

    Exact: a group is kept or dropped whole (its rows share g), and a group whose g no row of the
    other side matches is dropped by the join anyway. The part of the other side used (`_yielding`)
    is reached down inner joins only, each of which keeps a subset of its sides' rows, so the
    values of x it yields are a superset of the other side's; NULL never matches `=`, in the join
    or in the EXISTS."""
    children = tuple(reduce_grouped_joins(c) for c in node.children)
    if children != node.children:
        node = dataclasses.replace(node, children=children)
    if node.op != "join" or node.join_type != "inner" or node.cond is None:
        return node
    for side in (0, 1):
        grouped, other = node.children[side], node.children[1 - side]
        for conjunct in _conjuncts(node.cond):
            reduced = _reduced(grouped, other, conjunct)
            if reduced is not None:
                kids = list(node.children)
                kids[side] = reduced
                return dataclasses.replace(node, children=tuple(kids))
    return node


def _conjuncts(e: Expr) -> list[Expr]:
    if e.form == "op" and e.name == "AND":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]


def _reduced(grouped: TreeNode, other: TreeNode, conjunct: Expr) -> TreeNode | None:
    """`grouped` (filters and projections over an aggregate) with the aggregate's input semi
    joined to the part of `other` that yields the other operand of `conjunct` (`g = x`, g one of
    `grouped`'s columns that is a grouping column of the aggregate), or None."""
    if conjunct.form != "op" or conjunct.name != "=" or len(conjunct.args) != 2:
        return None
    mine = set(grouped.columns())
    for g, x in (conjunct.args, conjunct.args[::-1]):
        if g.form != "col" or g.name not in mine or not x.columns() or not x.columns() <= set(other.columns()):
            continue
        source = _yielding(other, x.columns())
        if source is None:
            continue
        rebuilt = _with_semi_join(grouped, g.name, source, x)
        if rebuilt is not None:
            return rebuilt
    return None


def _yielding(node: TreeNode, columns: set[str]) -> TreeNode | None:
    """The smallest subtree of `node` that still holds `columns`, down inner and cross joins only:
    a join keeps a subset of each side's rows, values unchanged, so the side yields at least every
    value combination the join does. Filters and semi/anti joins are kept, not skipped: they are
    what makes the other side selective."""
    if not columns <= set(node.columns()):
        return None
    if node.op == "join" and node.join_type in ("inner", "cross"):
        for child in node.children:
            found = _yielding(child, columns)
            if found is not None:
                return found
    return node


def _with_semi_join(node: TreeNode, column: str, source: TreeNode, x: Expr) -> TreeNode | None:
    """`node` with its aggregate's input semi joined to `source` on `group column = x`, following
    `column` down through filters and plain-column projections to the aggregate; None if it is not
    a plain grouping column there."""
    if node.op == "filter":
        child = _with_semi_join(node.children[0], column, source, x)
        return None if child is None else dataclasses.replace(node, children=(child,))
    if node.op == "project":
        e = dict(node.exprs).get(column)
        if e is None or e.form != "col":
            return None
        child = _with_semi_join(node.children[0], e.name, source, x)
        return None if child is None else dataclasses.replace(node, children=(child,))
    if node.op != "aggregate":
        return None
    e = dict(node.exprs).get(column)
    if e is None or e.form != "col" or not any(k.form == "col" and k.name == e.name for k in node.group_by):
        return None
    (child,) = node.children
    if e.name not in child.columns() or set(source.columns()) & set(child.columns()):
        return None
    on = Expr("op", "boolean", "=", args=(e, x))
    return dataclasses.replace(node, children=(TreeNode("join", children=(child, source), cond=on, join_type="semi"),))


def render_tree_over(subplan: PushedSubplan, relations: list, columns: list[list[str]]) -> exp.Select:
    """A pushed tree over `relations[i]` (a table or a query), the rows of its i-th table read (`table_reads()`, with
    that read's filters and columns applied; `columns[i]` its table's columns): each leaf is its
    own subplan over its tables, the tree above them (htap.rewrite.tree)."""
    tree = subplan.tree
    positions = tree.leaf_reads()

    def leaf_query(k: int) -> exp.Select:
        leaf = tree.leaves[k].subplan
        at = positions[k]
        if leaf.join is not None:
            return render.joined_select(leaf, [_relation(relations[i], render.table_alias(j)) for j, i in enumerate(at)])
        # The relation already holds the table's rows after the leaf's filters (table_part):
        # only the leaf's outputs, grouping, order and limit remain.
        top = dataclasses.replace(leaf, filters=(), where=())
        return render.select(top, _relation(relations[at[0]], render.table_alias(0)), columns[at[0]])

    return render_tree(tree, leaf_query)


def _relation(relation: exp.Expression, alias: str) -> exp.Expression:
    if isinstance(relation, exp.Query):
        return relation.copy().subquery(alias, copy=False)
    return relation.copy().as_(alias, quoted=True)


class _Renderer:
    def __init__(self, tree: PushedTree, leaf_query: Callable[[int], exp.Select]):
        self.tree = tree
        self.leaf_query = leaf_query
        self.aliases = 0

    def alias(self) -> str:
        self.aliases += 1
        return f"q{self.aliases}"

    def query(self, node: TreeNode) -> exp.Select:
        op = node.op
        if _flattens(node):
            return self.flat(node).select()
        if op == "scan":
            inner, names = self.leaf(node)
            return exp.select(*(_col(n).as_(o, quoted=True) for n, o in zip(names, node.output))).from_(
                inner.subquery(self.alias(), copy=False), copy=False)
        if op == "join":
            return self.outer_join(node)
        child = node.children[0]
        source = self.query(child).subquery(self.alias(), copy=False)
        if op == "aggregate":
            if not node.exprs:
                raise SubplanError("a pushed tree aggregate has no output")
            q = exp.select(*(self.expr(e).as_(n, quoted=True) for n, e in node.exprs)).from_(source, copy=False)
            if node.group_by:
                q = q.group_by(*(self.expr(g) for g in node.group_by), copy=False)
            return q
        q = _select([_col(c) for c in child.columns()]).from_(source, copy=False)
        if node.keys:
            q = q.order_by(*(self.ordered(k) for k in node.keys), copy=False)
        if op == "limit":
            q = q.limit(node.limit, copy=False)
        return q

    def leaf(self, node: TreeNode) -> tuple[exp.Select, list[str]]:
        inner = self.leaf_query(node.leaf)
        names = inner.named_selects
        if len(names) != len(node.output) or len(set(names)) != len(names) or not all(names):
            raise SubplanError(f"leaf {node.leaf} has columns {names}, the tree expects {len(node.output)}")
        return inner, names

    def flat(self, node: TreeNode) -> "_Block":
        """`node` as one FROM list with WHERE conjuncts (see _Block); a node that does not flatten
        (a scan, an outer join, an aggregate, a limit) is one derived table in it."""
        op = node.op
        if op == "scan":
            inner, names = self.leaf(node)
            alias = self.alias()
            return _Block([(inner.subquery(alias, copy=False), [])], [],
                          {o: _col(n, alias) for n, o in zip(names, node.output)})
        if not _flattens(node):
            alias = self.alias()
            return _Block([(self.query(node).subquery(alias, copy=False), [])], [],
                          {c: _col(c, alias) for c in node.columns()})
        if op == "project":
            block = self.flat(node.children[0])
            block.cols = {n: self.expr(e, block.cols) for n, e in node.exprs}
            return block
        if op == "filter":
            block = self.flat(node.children[0])
            block.where.append(self.expr(node.cond, block.cols))
            return block
        left, right = (self.flat(c) for c in node.children)
        both = dict(left.cols)
        for c, e in right.cols.items():
            if c in both:
                raise SubplanError(f"both sides of a pushed join have column {c!r}")
            both[c] = e
        cond = None if node.cond is None else self.expr(node.cond, both)
        if node.join_type in ("semi", "anti"):
            exists = exp.Exists(this=right.select([exp.Literal.number(1)], [] if cond is None else [cond]))
            left.where.append(exists if node.join_type == "semi" else exp.Not(this=exists))
            return left
        if cond is not None:  # on the right's last table: every table of both sides is in scope there
            right.items[-1][1].append(cond)
        return _Block(left.items + right.items, left.where + right.where, both)

    def outer_join(self, node: TreeNode) -> exp.Select:
        left, right = node.children
        la, ra = self.alias(), self.alias()
        sides = {c: _col(c, la) for c in left.columns()}
        for c in right.columns():
            if c in sides:
                raise SubplanError(f"both sides of a pushed join have column {c!r}")
            sides[c] = _col(c, ra)
        lq = self.query(left).subquery(la, copy=False)
        rq = self.query(right).subquery(ra, copy=False)
        outputs = [sides[c] for c in node.columns()]
        q = _select(outputs).from_(lq, copy=False)
        if node.cond is None:
            raise SubplanError(f"a pushed {node.join_type} join has no condition")
        on = exp.paren(self.expr(node.cond, sides), copy=False)
        return q.join(rq, on=on, join_type=_OUTER_JOINS[node.join_type], copy=False)

    def expr(self, e: Expr, cols: dict[str, exp.Expression] | None = None) -> exp.Expression:
        """A tree expression: render.expr, with aggregates and subqueries put in place of
        placeholder columns (render.expr knows neither); `cols` puts each column's expression in
        a flat block (or its side's qualified column in a join) in place of its name (before the
        subqueries go in: their names are their own scope's)."""
        slots: dict[str, exp.Expression] = {}
        plain = self._placeholders(e, slots)
        node = render.expr(plain)
        if cols:
            node = _substituted(node, cols)
        if not slots:
            return node

        def fill(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name in slots:
                return slots[n.name].copy()
            return n

        return node.transform(fill, copy=False)

    def _placeholders(self, e: Expr, slots: dict[str, exp.Expression]) -> Expr:
        if e.form == "agg":
            name = f"__slot{len(slots)}_{id(slots)}"
            slots[name] = self.aggregate(e)
            return Expr.column(name, e.type)
        if e.form == "subquery":
            name = f"__slot{len(slots)}_{id(slots)}"
            q = self.query(e.plan)
            slots[name] = q.subquery(copy=False)
            return Expr.column(name, e.type)
        if e.form == "op" and e.name == "/":
            name = f"__slot{len(slots)}_{id(slots)}"
            slots[name] = self.divide(e)
            return Expr.column(name, e.type)
        if not e.args:
            return e
        return dataclasses.replace(e, args=tuple(self._placeholders(a, slots) for a in e.args))

    def divide(self, e: Expr) -> exp.Expression:
        """`a / b` for decimals (Spark's AVG of decimals: its sum over its count), rendered by
        htap.rewrite.render.divide, the one renderer of decimal division."""
        num, den = e.args
        return render.divide(self.expr(num), num.type, self.expr(den), den.type, e.type)

    def aggregate(self, e: Expr) -> exp.Expression:
        if e.name == "count_star":
            return exp.Count(this=exp.Star())
        arg = self.expr(e.args[0])
        if e.distinct:
            arg = exp.Distinct(expressions=[arg])
        node = _AGGREGATES[e.name](this=arg)
        if e.name == "sum":  # Spark's result type (DECIMAL(p + 10, s), BIGINT, DOUBLE)
            return exp.Cast(this=node, to=render.sql_type(e.type))
        return node

    def ordered(self, k: SortKey) -> exp.Ordered:
        return exp.Ordered(this=self.expr(k.expr), desc=not k.asc, nulls_first=k.nulls_first)


def _select(outputs: list[exp.Expression]) -> exp.Select:
    """SELECT the outputs; a node Spark needs only the rows of (`count(*)` above a join) selects
    a constant, as no SQL dialect selects nothing."""
    return exp.select(*outputs) if outputs else exp.select(exp.Literal.number(1).as_("__row", quoted=True))


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def _substituted(node: exp.Expression, cols: dict[str, exp.Expression]) -> exp.Expression:
    """Each column named in `cols` replaced by its expression there: a qualified column (a
    correlated EXISTS must not resolve a name to the wrong scope) or a projected expression,
    parenthesized so that it binds as one operand."""

    def put(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in cols:
            e = cols[n.name].copy()
            return e if isinstance(e, (exp.Column, exp.Literal)) else exp.paren(e, copy=False)
        return n

    return node.transform(put, copy=False)


def _flattens(node: TreeNode) -> bool:
    """Filters, projections, inner and cross joins and semi/anti joins render as one flat SELECT
    (_Block): every one of them commutes with an inner join above it, so the target's optimizer
    is free to order all the joins and to run an EXISTS after the selective ones (TPC-H Q21's
    NOT EXISTS over lineitem below the joins with nation and orders: 11.7x DuckDB's own time as
    nested derived tables, which DuckDB evaluated in Spark's order). Outer joins stay derived
    tables: a filter does not commute with the null-supplying side."""
    return node.op in ("project", "filter") or (node.op == "join" and node.join_type in ("inner", "cross", "semi", "anti"))


@dataclasses.dataclass
class _Block:
    """A flattened chain as the parts of one SELECT: relations joined in order (each after the
    first with its ON conjuncts; none: CROSS JOIN), WHERE conjuncts (filters, EXISTS / NOT EXISTS
    for semi and anti joins) and each tree column's expression over the relations' aliases.

    Why it is exact: a filter, a projection and an EXISTS are functions of one row, so evaluating
    them after inner joins rather than before gives the same rows (the join only pairs or drops
    rows); a semi/anti join's condition names only its two sides' columns, which keep their
    values in the flat FROM. NOT IN's null-aware condition (`a = b OR (a = b) IS NULL`) stays
    inside its NOT EXISTS, untouched."""

    items: list[tuple[exp.Expression, list[exp.Expression]]]
    where: list[exp.Expression]
    cols: dict[str, exp.Expression]

    def select(self, outputs: list[exp.Expression] | None = None, also: list[exp.Expression] = ()) -> exp.Select:
        """SELECT the block's columns (or `outputs`) FROM its relations WHERE its conjuncts and `also`."""
        if outputs is None:
            outputs = [e.copy().as_(n, quoted=True) for n, e in self.cols.items()]
        (first, _), *rest = self.items
        q = _select(outputs).from_(first, copy=False)
        for relation, on in rest:
            if on:
                q = q.join(relation, on=_conjunction(on), join_type="inner", copy=False)
            else:
                q = q.join(relation, join_type="cross", copy=False)
        where = [*self.where, *also]
        return q.where(_conjunction(where), copy=False) if where else q


def _conjunction(conjuncts: list[exp.Expression]) -> exp.Expression:
    return exp.and_(*(exp.paren(c, copy=False) for c in conjuncts), copy=False)
