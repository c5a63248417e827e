"""`htap verify data` results as Great Expectations validation results, one suite per table.

Written as JSON in the layout of Great Expectations 1.x's `ExpectationSuiteValidationResult`
(`success`, `results[]` of `ExpectationValidationResult` with `expectation_config` {`type`,
`kwargs`, `meta`}, `result`, `exception_info`; `suite_name`, `statistics`, `meta`), without
depending on the great_expectations package (it pulls in scipy, altair, pydantic, ...). Checked
against great_expectations 1.24: a project that uses GX loads each file with
`ExpectationSuiteValidationResultSchema().load(json.load(f))` and renders it with
`ValidationResultsPageRenderer` / Data Docs.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

# Only built-in GX expectation types, with their own kwargs (so Data Docs can render them):
# the row count, and one `unexpected_rows_expectation` per kind of difference, whose query
# documents the check; what it found is the result (observed_value = rows, details = keys).
ROW_COUNT = "expect_table_row_count_to_equal"
UNEXPECTED_ROWS = "unexpected_rows_expectation"


def suite_name(source: str, table: str) -> str:
    return f"htap_verify.{source}.{table}"


def _result(success: bool, type_: str, kwargs: dict, result: dict, meta: dict, error: str | None = None) -> dict:
    return {
        "success": success,
        "expectation_config": {"type": type_, "kwargs": kwargs, "meta": meta},
        "result": result,
        "meta": {},
        "exception_info": {
            "raised_exception": error is not None,
            "exception_message": error,
            "exception_traceback": None,
        },
    }


def _rows_check(what: str, query: str, count: int, listed: list, meta: dict) -> dict:
    return _result(
        count == 0,
        UNEXPECTED_ROWS,
        {"unexpected_rows_query": query, "description": what},
        {"observed_value": count, "details": {"unexpected_rows": listed}},
        meta,
    )


def table_validation(report: dict, table: dict) -> dict:
    """The validation result of one table of a `verify_data` report."""
    name = table["table"]
    snapshot = report["snapshot"]
    batch = {"datasource_name": f"htap.{report['source']}", "data_asset_name": name}
    key = ", ".join(table["key"])
    at_source = f"{name} /* source, snapshot {snapshot['source_snapshot']} */"
    meta = {"table": name, "key": table["key"], "seq": table["seq"], "ranges": table["ranges"]}
    if table["error"]:
        results = [
            _result(False, ROW_COUNT, {"value": table["source_rows"]}, {"observed_value": None}, meta, table["error"])
        ]
    else:
        results = [
            _result(
                table["source_rows"] == table["replica_rows"],
                ROW_COUNT,
                {"value": table["source_rows"]},
                {"observed_value": table["replica_rows"]},
                {**meta, "description": "replica rows at the seq = source rows at the snapshot"},
            ),
            _rows_check(
                "every source row's key is in the replica",
                f"SELECT {key} FROM {at_source} EXCEPT SELECT {key} FROM {{batch}}",
                table["missing_count"], table["missing"], meta,
            ),
            _rows_check(
                "every replica row's key is in the source",
                f"SELECT {key} FROM {{batch}} EXCEPT SELECT {key} FROM {at_source}",
                table["extra_count"], table["extra"], meta,
            ),
            _rows_check(
                "rows with the same key are equal",
                f"SELECT {key} FROM {{batch}} r JOIN {at_source} s USING ({key}) WHERE r.* IS DISTINCT FROM s.*",
                table["different_count"], table["different"], meta,
            ),
            _rows_check(
                "every key range's (row count, row hash sum) is equal",
                f"SELECT range FROM ranges WHERE checksum({{batch}}, range) <> checksum({at_source}, range)",
                len(table["mismatched_ranges"]), table["mismatched_ranges"], meta,
            ),
        ]
    ok = sum(1 for r in results if r["success"])
    return {
        "success": ok == len(results),
        "results": results,
        "suite_name": suite_name(report["source"], name),
        "suite_parameters": {},
        "statistics": {
            "evaluated_expectations": len(results),
            "successful_expectations": ok,
            "unsuccessful_expectations": len(results) - ok,
            "success_percent": 100.0 * ok / len(results),
        },
        "meta": {
            "great_expectations_version": "1.x layout (written by spark-htap)",
            "active_batch_definition": batch,
            "batch_markers": {"htap_seq": table["seq"], **snapshot},
            "batch_spec": batch,
            "run_id": {"run_name": f"htap verify data {report['started_at']}", "run_time": report["started_at"]},
            "validation_time": report["started_at"],
            "validation_id": str(uuid.uuid4()),
        },
        "id": None,
    }


def write_validations(report: dict, folder: Path) -> list[Path]:
    """One `<suite>.json` per table in `folder`; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for table in report["tables"]:
        v = table_validation(report, table)
        path = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", v["suite_name"]) + ".json")
        path.write_text(json.dumps(v, indent=2, default=str) + "\n")
        paths.append(path)
    return paths
