"""`htap verify data` results as Great Expectations validation results, one suite per table.

Written as JSON in the layout of Great Expectations 1.x's `ExpectationSuiteValidationResult`
(`success`, `results[]` of `ExpectationValidationResult` with `expectation_config` {`type`,
`kwargs`, `meta`}, `result`, `exception_info`; `suite_name`, `statistics`, `meta`), without
depending on the great_expectations package (it pulls in scipy, altair, pydantic, ...). A
project that uses GX loads each file with
`ExpectationSuiteValidationResult(**json.load(f))` and renders it in Data Docs.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

# One expectation per check the verifier makes. The first is GX's own; the others are custom
# expectation types (GX renders unknown types generically).
ROW_COUNT = "expect_table_row_count_to_equal_other_table"
NO_MISSING = "expect_replica_to_contain_every_source_key"
NO_EXTRA = "expect_replica_to_contain_no_key_absent_from_source"
NO_DIFFERENT = "expect_replica_rows_to_equal_source_rows"
ALL_RANGES = "expect_replica_range_checksums_to_equal_source"


def suite_name(source: str, table: str) -> str:
    return f"htap_verify.{source}.{table}"


def _result(success: bool, type_: str, kwargs: dict, result: dict, error: str | None = None) -> dict:
    return {
        "success": success,
        "expectation_config": {"type": type_, "kwargs": kwargs, "meta": {}},
        "result": result,
        "meta": {},
        "exception_info": {
            "raised_exception": error is not None,
            "exception_message": error,
            "exception_traceback": None,
        },
    }


def _unexpected(count: int, listed: list, total: int) -> dict:
    return {
        "element_count": total,
        "unexpected_count": count,
        "unexpected_percent": (100.0 * count / total) if total else 0.0,
        "partial_unexpected_list": listed[:20],
        "unexpected_list": listed,
    }


def table_validation(report: dict, table: dict) -> dict:
    """The validation result of one table of a `verify_data` report."""
    name = table["table"]
    batch = {"datasource_name": f"htap.{report['source']}", "data_asset_name": name}
    total = table["source_rows"]
    common = {"table": name, "key": table["key"], "seq": table["seq"]}
    error = table["error"]
    if error:
        results = [_result(False, ALL_RANGES, common, {}, error)]
    else:
        results = [
            _result(
                table["source_rows"] == table["replica_rows"],
                ROW_COUNT,
                {"other_table_name": f"{report['source']}:{name} (source at the snapshot)", **common},
                {"observed_value": {"self": table["replica_rows"], "other": table["source_rows"]}},
            ),
            _result(table["missing_count"] == 0, NO_MISSING, common, _unexpected(table["missing_count"], table["missing"], total)),
            _result(table["extra_count"] == 0, NO_EXTRA, common, _unexpected(table["extra_count"], table["extra"], table["replica_rows"])),
            _result(
                table["different_count"] == 0, NO_DIFFERENT, common,
                _unexpected(table["different_count"], table["different"], total),
            ),
            _result(
                not table["mismatched_ranges"],
                ALL_RANGES,
                {**common, "ranges": table["ranges"]},
                {"observed_value": len(table["mismatched_ranges"]), "details": {"mismatched_ranges": table["mismatched_ranges"]}},
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
            "batch_markers": {"htap_seq": table["seq"], **report["snapshot"]},
            "batch_spec": batch,
            "run_id": {"run_name": f"htap verify data {report['started_at']}", "run_time": report["started_at"]},
            "validation_time": report["started_at"],
            "validation_id": str(uuid.uuid4()),
        },
        "batch_id": f"htap.{report['source']}-{name}",
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
