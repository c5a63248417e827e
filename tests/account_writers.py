"""Writers that never stop, for the derived-view tests: random single-row updates that move
`acc` rows between groups and change their values, deletes and inserts, on connections of their
own, until the block ends. An error in a writer fails the test."""

from __future__ import annotations

import random
import threading
from contextlib import contextmanager
from typing import Iterator

import psycopg2

from conftest import pg_dsn


@contextmanager
def account_writers(schema: str, *, writers: int = 2, ids: int = 300, step: int = 5, branches: int = 10,
                    inserted_balance: str = "1.5") -> Iterator[None]:
    """`schema.acc (id, branch, region, balance, n)` written by `writers` threads while the block runs."""
    stop, errors = threading.Event(), []

    def write(seed: int) -> None:
        conn = psycopg2.connect(pg_dsn())
        conn.autocommit = True
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(f"UPDATE {schema}.acc SET branch = %s, region = %s, balance = balance + %s, n = %s"
                                f" WHERE id = %s", (rng.randint(0, branches), rng.choice(["r0", "r1", None]),
                                                    rng.randint(-step, step), rng.choice([None, rng.randint(0, 40)]),
                                                    rng.randint(1, ids)))
                    if rng.random() < 0.2:
                        cur.execute(f"DELETE FROM {schema}.acc WHERE id = %s", (rng.randint(1, ids),))
                    if rng.random() < 0.2:
                        cur.execute(f"INSERT INTO {schema}.acc VALUES (%s, 1, 'r2', {inserted_balance}, 2)"
                                    f" ON CONFLICT (id) DO NOTHING", (rng.randint(1, ids),))
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
