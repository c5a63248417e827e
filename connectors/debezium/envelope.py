"""Debezium records: Kafka records or JSON lines, the schema/payload wrapper, names and transaction ids."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from htap.errors import SourceError


@dataclass
class Record:
    """One Kafka record (or one line of a file): topic and key when known, the value, and a ref
    the transport uses to commit (None for files)."""

    topic: str | None
    key: Any
    value: Any
    ref: Any = None


def maybe_json(v):
    if isinstance(v, (str, bytes)):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def parse_line(line: str) -> Record | None:
    """A JSON line as a Record; None for a blank line."""
    line = line.strip()
    if not line:
        return None
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise SourceError(f"not a JSON Debezium event ({e}): {line[:120]!r}") from e
    if isinstance(doc, dict) and "topic" in doc and ("value" in doc or isinstance(doc.get("payload"), (str, type(None)))):
        value = doc["value"] if "value" in doc else doc.get("payload")
        return Record(doc.get("topic"), maybe_json(doc.get("key")), maybe_json(value))
    return Record(None, None, doc)


def unwrap(doc) -> tuple[dict | None, Any]:
    """(schema, payload) of a JSON-converter document; schema None when it was sent without one."""
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc and len(doc) == 2:
        return doc["schema"], doc["payload"]
    return None, doc


def source_table(source: dict) -> tuple[str, str]:
    schema = source.get("schema") or source.get("db") or ""
    if source.get("connector") == "mysql":
        schema = source.get("db") or schema
    return schema, source.get("table") or ""


_PG_TXN_ID = re.compile(r"^(\d+):\d+$")


def txn_key(txn_id) -> str:
    """The transaction id to match BEGIN, END and data events by.

    Postgres ids are `<xid>:<lsn>`, and the LSN part may differ between the markers and the
    events of one transaction: match by the xid. MySQL ids (a GTID, or binlog file:position)
    are used whole."""
    text = str(txn_id)
    m = _PG_TXN_ID.match(text)
    return m.group(1) if m else text


def collection(name: str) -> tuple[str, str]:
    """A data collection name (schema.table or db.table) as (schema, table)."""
    schema, _, table = name.partition(".")
    return (schema, table) if table else ("", schema)
