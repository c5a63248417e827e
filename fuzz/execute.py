"""Running one query text in Spark: its rows (as Arrow), its error, its time, and whether the
executed plan is fully pushed into one HtapScan."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from fuzz.compare import Table, from_arrow

# Physical operators that do no work of their own over the scans' rows: projections, row/columnar
# conversion, code generation wrappers, AQE's wrappers.
PASSIVE = {
    "ProjectExec", "ColumnarToRowExec", "WholeStageCodegenExec", "InputAdapter", "AdaptiveSparkPlanExec",
    "ResultQueryStageExec",
}


@dataclass
class Result:
    table: Table | None = None
    error: str | None = None
    error_key: str | None = None
    error_detail: str | None = None  # the whole error text (`--sql ... --full-errors` prints it)
    seconds: float = 0.0
    pushed: bool | None = None  # replica route only: one HtapScan and nothing else in Spark
    left_in_spark: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def error_key(e: BaseException) -> str:
    """What identifies an error across variants of a query: Spark's error class when it has a
    specific one, else the innermost cause (a Python worker's exception line, or Java's last
    'Caused by'), without numbers and ids."""
    cls = None
    get = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    if get is not None:
        try:
            cls = get()
        except Exception:  # noqa: BLE001 - best effort
            cls = None
    if cls and not cls.startswith("INTERNAL_ERROR") and cls not in GENERIC_CLASSES:
        return cls
    return f"{cls or type(e).__name__}: {_cause(str(e))}"


GENERIC_CLASSES = {"FAILED_READ_FILE", "TASK_WRITE_FAILED", "PYTHON_EXCEPTION"}


def _cause(text: str) -> str:
    """The innermost cause of a Java/Python traceback, normalized: the last Python exception line
    (`module.Error: message`), else the last 'Caused by:', else the first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tracebacks = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    after = lines[tracebacks[-1]:] if tracebacks else []
    python = [ln for ln in after if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Warning): ", ln)]
    java = [ln for ln in lines if ln.startswith("Caused by:")]
    line = python[-1] if python else java[-1] if java else lines[0] if lines else ""
    m = re.search(r"\[([A-Z_.]+)\]", line)
    return m.group(1) if m else _normalize(line)[:160]


def _normalize(s: str) -> str:
    return re.sub(r"#\d+|\d+", "N", s)


def short_error(e: BaseException, limit: int = 600) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = "\n".join(lines[:4])
    causes = [ln.strip() for ln in lines if ln.strip().startswith("Caused by:") or "Error:" in ln[:80]]
    if causes and causes[-1] not in head:
        head += "\n  ... " + causes[-1]
    return f"{type(e).__name__}: {head[:limit]}"


def run(spark, text: str, timeout_s: float, inspect_plan: bool = False) -> Result:
    """Run `text` to completion; cancel its jobs after `timeout_s` (reported as an error)."""
    fired = threading.Event()

    def on_timeout() -> None:
        fired.set()
        spark.sparkContext.cancelAllJobs()

    timer = threading.Timer(timeout_s, on_timeout)
    timer.daemon = True
    started = time.perf_counter()
    timer.start()
    df = None
    try:
        df = spark.sql(text)
        arrow = df.toArrow()
        res = Result(table=from_arrow(arrow))
    except Exception as e:  # noqa: BLE001 - any error is a result of the query
        if fired.is_set():
            res = Result(error=f"timeout: cancelled after {timeout_s:.0f} s", error_key="TIMEOUT")
        else:
            res = Result(error=short_error(e), error_key=error_key(e), error_detail=str(e))
    finally:
        timer.cancel()
    res.seconds = time.perf_counter() - started
    if inspect_plan and res.ok and df is not None:
        try:
            res.pushed, res.left_in_spark = plan_pushed(df)
        except Exception:  # noqa: BLE001 - the statistic is best effort
            res.pushed = None
    return res


def plan_pushed(df) -> tuple[bool, list[str]]:
    """(fully pushed, the operators left in Spark): fully pushed when the executed plan (its
    subqueries included) holds exactly one BatchScan, an HtapScan, and otherwise only PASSIVE
    operators. Under AQE the plan as planned is inspected (what EXPLAIN shows), not the one AQE
    re-planned at run time: that one may have replaced whole subtrees by an empty relation when a
    join side turned out empty, hiding the scans and joins the planner left in Spark."""
    root = df._jdf.queryExecution().executedPlan()
    scans = 0
    other: list[str] = []
    stack = [root]
    seen = 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > 10_000:
            break
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            stack.append(node.initialPlan())
        elif name.endswith("QueryStageExec") and name != "ResultQueryStageExec":
            other.append(name.replace("QueryStageExec", "Exchange"))
            stack.append(node.plan())
        elif name == "ResultQueryStageExec":
            stack.append(node.plan())
        elif name == "BatchScanExec":
            if node.scan().getClass().getSimpleName() == "HtapScan":
                scans += 1
            else:
                other.append(name)
        elif name not in PASSIVE:
            other.append(name.removesuffix("Exec"))
        children = node.children()
        for i in range(children.size()):
            stack.append(children.apply(i))
        subs = node.subqueries()
        for i in range(subs.size()):
            stack.append(subs.apply(i))
    if scans != 1:
        other.append(f"{scans} HtapScans")
    return scans == 1 and not other, other
