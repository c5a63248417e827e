"""Freshness and ingest benchmark (issue 4).

  python -m bench.freshness [--rate 2000] [--seconds 60] [--scale 10] [--idle-seconds 300]

Runs pgbench (TPC-B) at a fixed rate against a Postgres database of its own while `htap serve`
replicates the pgbench tables, and reports:
- freshness: p50/p99 of (time a commit became visible in the replica - time it committed),
  sampled by noting the source's WAL position every 50 ms and when the replica's max safe seq
  passes it;
- the sustained change rate the replica absorbed during the run;
- idle lag: right after the pgbench run, with nothing committing, p50/p99 of how long the max
  safe seq takes to pass the source's `pg_current_wal_lsn()` sampled every 50 ms for
  `--idle-seconds` (background WAL such as autovacuum and standby snapshots keeps moving it);
- ingest throughput: one bulk transaction updating every account row, and the row changes per
  second until the replica has it.
- the in-memory tail (issue 28): in the same run, p50/p99 of (time a commit became *visible* —
  readable through `spark.htap.readTail` from the service's memory — minus the time it committed),
  sampled every 10 ms beside the durable figure (also sampled every 10 ms);
- read-your-writes under the pgbench load: `--rw-rounds` rounds of "commit an update, then plan and
  read the row as a Spark task would" with `readAfter = now` (with and without the tail), each
  counted a miss if the read does not show the write, and the planning latency of each mode
  beside plain planning (no readAfter).
Targets: p50 < 1 s and p99 < 3 s at 2,000 transactions/s; >= 20k row changes/s; idle lag p99 < 2 s;
through the tail p50 <= 0.1 s and p99 <= 0.3 s; 0 read-your-writes misses.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psycopg2

from htap.seq import lsn_to_int

from bench.runners import cpu_seconds

DB = "htap_bench"


def progress(msg: str) -> None:
    print(f"[bench.freshness] {msg}", flush=True)


def pgbench() -> str:
    found = shutil.which("pgbench") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))), None)
    if not found:
        sys.exit("pgbench not found: install postgresql-contrib / the Postgres server package")
    return found


_CHECKPOINT = re.compile(r"^(\S+ \S+) INFO \S+: checkpoint timing: (\d+) changes in ([\d.]+) s \(([^)]*)\)"
                         r"(?:; oldest commit ([\d.]+) s old at start)?")
_COMPACTION = re.compile(r"^(\S+ \S+) INFO \S+: (\w+) compaction of (\S+) partition \d+: .* in ([\d.]+) s,"
                         r" ([\d.]+) s of it holding the partition's lock")


def _stamp(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "max": float(max(values))}


def checkpoint_profile(log: Path, since: float, until: float) -> dict:
    """Where the service's time went between `since` and `until` (Unix seconds), from its log:
    checkpoint durations by phase (htap.observe.Phases), the gaps between checkpoint ends, how old
    the oldest buffered commit was when its checkpoint ended, and the compactions' lock holds."""
    ends, took, visible, phases, holds = [], [], [], {}, []
    for line in log.read_text(errors="replace").splitlines():
        m = _CHECKPOINT.match(line)
        if m:
            at = _stamp(m.group(1))
            if not since <= at <= until:
                continue
            ends.append(at)
            took.append(float(m.group(3)))
            for item in filter(None, (x.strip() for x in m.group(4).split(","))):
                name, value = item.rsplit(" ", 1)
                phases.setdefault(name, []).append(float(value))
            if m.group(5):
                visible.append(float(m.group(5)) + float(m.group(3)))
            continue
        m = _COMPACTION.match(line)
        if m and since <= _stamp(m.group(1)) <= until:
            holds.append(float(m.group(5)))
    return {
        "checkpoints": _spread(took), "gap_between_ends": _spread(list(np.diff(ends))),
        "oldest_commit_visible_after": _spread(visible), "compaction_lock_held": _spread(holds),
        "phases": {name: _spread(v) for name, v in sorted(phases.items(), key=lambda kv: -sum(kv[1]))},
    }


def _show(name: str, d: dict) -> str:
    if not d.get("n"):
        return f"  {name}: none"
    return f"  {name}: n {d['n']}, p50 {d['p50']:.3f} s, p99 {d['p99']:.3f} s, max {d['max']:.3f} s"


def sample_lag(cur, safe, seconds: float, every_s: float = 0.05) -> list[float]:
    """For `seconds`, note the source's WAL position every `every_s` and, per note, how long
    until the replica's max safe seq passes it (reading the position writes no WAL). Notes still
    pending at the end wait for the safe seq, up to 60 s more."""
    pending: list[tuple[float, int]] = []
    lags: list[float] = []
    end = time.time() + seconds
    while time.time() < end or (pending and time.time() < end + 60):
        now = time.time()
        if now < end:
            cur.execute("SELECT pg_current_wal_lsn()")
            pending.append((now, lsn_to_int(cur.fetchone()[0])))
        s = safe()
        now = time.time()
        while pending and pending[0][1] - 1 <= s:
            lags.append(now - pending.pop(0)[0])
        time.sleep(every_s)
    lags += [time.time() - t0 for t0, _ in pending]  # never passed: counted as what they waited
    return lags


class ReadYourWrites(threading.Thread):
    """Rounds of: commit an update of the `rw` table, then plan its scan as Spark's driver does
    (htap.pushdown.datasource.HtapReader) and read it as a task does, in one of three modes:
    plain (no readAfter: planning latency only), readAfter=now, readAfter=now + readTail."""

    MODES = ("plain", "read_after", "read_after_tail")

    def __init__(self, config: Path, dsn: str, rounds: int, load_ended: threading.Event):
        """Until `rounds` readAfter+readTail rounds (the others in between), and none after
        `load_ended` (they measure under load)."""
        super().__init__(name="read-your-writes")
        self.config, self.dsn, self.rounds, self.load_ended = config, dsn, rounds, load_ended
        self.done: dict[str, int] = {m: 0 for m in self.MODES}
        self.planning: dict[str, list[float]] = {m: [] for m in self.MODES}
        self.misses: dict[str, int] = {m: 0 for m in self.MODES[1:]}
        self.tail_reads = 0
        self.fallbacks: dict[str, int] = {m: 0 for m in self.MODES[1:]}
        self.reasons: list[str] = []  # why the source answered, when it did
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def _run(self) -> None:
        import uuid

        from pyspark.sql.types import LongType, StructField, StructType

        from htap.conf import load_config
        from htap.pushdown.datasource import HtapReader, ScanOptions
        from htap.replica.leases import release_queries
        from htap.replica.metadata import MetadataStore
        from htap.rewrite.pushed import table_plan, to_json

        schema = StructType([StructField("v", LongType())])
        pushed = to_json(table_plan("public.rw", ["v"]))
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        cur = conn.cursor()
        store = MetadataStore(load_config(self.config).metadata)
        try:
            i = -1
            while self.done["read_after_tail"] < self.rounds and not self.load_ended.is_set():
                i += 1
                # plain and readAfter+readTail alternate; readAfter without the tail (a checkpoint's
                # wait, ~0.4 s) every tenth round, so the rounds fit in the load's duration
                mode = "read_after" if i % 20 == 19 else self.MODES[0 if i % 2 else 2]
                cur.execute("UPDATE rw SET v = v + 1 WHERE id = 1 RETURNING v")
                written = cur.fetchone()[0]
                owner = uuid.uuid4().hex
                options = {"config": str(self.config), "source": "bench", "table": "public.rw",
                           "pushed": pushed, "snapshot_token": uuid.uuid4().hex,
                           "snapshot_tables": "bench.public.rw", "lease_owner": owner}
                if mode != "plain":
                    options["read_after"] = "now"
                if mode == "read_after_tail":
                    options["read_tail"] = "true"
                started = time.perf_counter()
                reader = HtapReader(ScanOptions.parse(options), schema)
                self.planning[mode].append(time.perf_counter() - started)
                if mode != "plain":
                    seen = [v for p in reader.partitions() for b in reader.read(p) for v in b.column(0).to_pylist()]
                    if seen != [written]:
                        self.misses[mode] += 1
                    plans = [getattr(p, "plan", None) for p in reader.partitions()]
                    if mode == "read_after_tail" and any(p is not None and p.tail for p in plans):
                        self.tail_reads += 1
                    if None in plans:  # readAfter was not met in time: the source answered
                        self.fallbacks[mode] += 1
                        table_id = store.get_table("bench", "public", "rw").id
                        self.reasons.append(f"{mode}: {store.recent_scans(table_id, 1)[0].reason}")
                release_queries(store, [owner])  # as the driver does when the query ends
                self.done[mode] += 1
        finally:
            store.close()
            conn.close()

    def results(self) -> dict:
        out = {"rounds": self.done, "rounds_per_mode": self.done["read_after_tail"], "misses": self.misses, "reads_through_the_tail": self.tail_reads,
               "source_answered": self.fallbacks, "why_the_source_answered": self.reasons[:5]}
        for mode, times in self.planning.items():
            out[f"planning_{mode}"] = _spread(times)
        return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", default=None,
                   help="a Postgres server with wal_level=logical; default: a private one started here on 55440")
    p.add_argument("--work", type=Path, default=Path("bench/.work/freshness"))
    p.add_argument("--user", default="postgres")
    p.add_argument("--rate", type=int, default=2000, help="pgbench transactions per second")
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--scale", type=int, default=10, help="pgbench scale (100k accounts each)")
    p.add_argument("--idle-seconds", type=float, default=300.0,
                   help="idle period after the pgbench run over which the safe seq's lag is measured (0 skips)")
    p.add_argument("--json", default="bench/results/freshness.json")
    p.add_argument("--service-log", help="keep a copy of the service's log here")
    p.add_argument("--flush-interval", type=float, default=None,
                   help="replica.flush_interval_s for this run (default: the config's default, 0.5 s)")
    p.add_argument("--no-tail", action="store_true", help="run the service without its in-memory tail")
    p.add_argument("--rw-rounds", type=int, default=1000,
                   help="readAfter+readTail rounds at most (plain and durable readAfter ones between them), while pgbench runs (0 skips)")
    args = p.parse_args(argv)
    private = args.port is None
    if private:
        from htap import localpg

        localpg.stop(args.work / "pg")  # a previous run's, if it was interrupted
        args.port, args.host, args.user = "55440", "127.0.0.1", "postgres"
        localpg.start(args.work / "pg", int(args.port), wal_level="logical", settings={"max_connections": "100"})
    base = f"host={args.host} port={args.port} user={args.user}"
    admin = psycopg2.connect(f"{base} dbname=postgres")
    admin.autocommit = True
    cur = admin.cursor()
    cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'htap_bench' AND NOT active")
    cur.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    cur.execute(f"CREATE DATABASE {DB}")
    env = {**os.environ, "PGHOST": args.host, "PGPORT": args.port, "PGUSER": args.user}
    progress(f"pgbench -i -s {args.scale}")
    subprocess.run([pgbench(), "-i", "-q", "-s", str(args.scale), DB], check=True, env=env, capture_output=True)
    with psycopg2.connect(f"{base} dbname={DB}") as conn, conn.cursor() as c:
        c.execute("CREATE TABLE rw (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO rw VALUES (1, 0)")

    work = Path(tempfile.mkdtemp(prefix="htap-fresh-"))
    dsn = f"{base} dbname={DB}"
    htap = [sys.executable, "-m", "htap.app.cli", "--config", str(work / "htap.toml")]
    subprocess.run([*htap, "init", "--dsn", dsn, "--source", "bench"], check=True, capture_output=True)
    if args.no_tail:
        config = work / "htap.toml"
        config.write_text(config.read_text().replace("[service]", '[service]\ntail_address = ""', 1))
        args.rw_rounds = 0
    if args.flush_interval is not None:
        config = work / "htap.toml"
        config.write_text(re.sub(r"(?m)^#?\s*flush_interval_s\s*=.*$", f"flush_interval_s = {args.flush_interval}",
                                 config.read_text()))
    for t in ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "rw"):  # pgbench_history has no key
        subprocess.run([*htap, "tables", "add", f"public.{t}"], check=True, capture_output=True)
    log = open(work / "serve.log", "wb")
    service = subprocess.Popen([*htap, "serve"], stdout=log, stderr=log)

    from htap.conf import load_config
    from htap.replica.metadata import MetadataStore

    store = MetadataStore(load_config(work / "htap.toml").metadata)

    def safe() -> int:
        seqs = [t.max_safe_seq or 0 for t in store.list_tables("bench")]
        return min(seqs) if seqs and all(t.readable for t in store.list_tables("bench")) else 0

    asking: list = []  # one connection, kept: a new channel per sample cost the service a connection each

    def visible() -> int:
        """The service's visible seq (its in-memory tail), 0 until it can be asked."""
        from htap.replica.tail import TailUnavailable, connect, service_tail, status

        if not asking:
            found = service_tail(store.service_beats(), "bench", time.time())
            if found is None:
                return 0
            asking.append(connect(*found))
        try:
            return status(asking[0]).get("bench", {}).get("visible", 0)
        except TailUnavailable:
            return 0

    results: dict = {"rate_tps": args.rate, "seconds": args.seconds, "scale": args.scale,
                     "flush_interval_s": load_config(work / "htap.toml").flush_interval_s}
    try:
        while not safe() or not (args.no_tail or visible()):
            time.sleep(0.2)
        progress("initial copy done; starting pgbench")
        src = psycopg2.connect(dsn)
        src.autocommit = True
        scur = src.cursor()
        versions0 = sum(store.delta_stats(t.id)[1] for t in store.list_tables("bench"))
        bench = subprocess.Popen(
            [pgbench(), "-n", "-R", str(args.rate), "-T", str(args.seconds), "-c", "8", "-j", "2", "-P", "10", DB],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        load_ended = threading.Event()
        rw = ReadYourWrites(work / "htap.toml", dsn, args.rw_rounds, load_ended)
        if args.rw_rounds:
            rw.start()
        samples: list[tuple[float, int]] = []  # (when, position) not yet durable
        shown: list[tuple[float, int]] = []  # not yet visible
        delays: list[float] = []
        tail_delays: list[float] = []
        started = time.time()
        if args.no_tail:
            shown = None  # nothing to sample
        while bench.poll() is None or samples or shown:
            now = time.time()
            if bench.poll() is None:
                scur.execute("SELECT pg_current_wal_lsn()")
                noted = (now, lsn_to_int(scur.fetchone()[0]))
                samples.append(noted)
                if shown is not None:
                    shown.append(noted)
            v = 0 if args.no_tail else visible()
            now = time.time()
            while shown and shown[0][1] - 1 <= v:
                tail_delays.append(now - shown.pop(0)[0])
            s = safe()
            now = time.time()
            while samples and samples[0][1] - 1 <= s:
                delays.append(now - samples.pop(0)[0])
            if time.time() - started > args.seconds + 60:
                break
            time.sleep(0.01)
        load_ended.set()
        if args.rw_rounds:
            rw.join()
            if rw.error is not None:
                raise rw.error
            results["read_your_writes"] = rw.results()
        out = bench.stdout.read()
        elapsed = time.time() - started
        tps = next((float(l.split("=")[1].split()[0]) for l in out.splitlines() if l.startswith("tps =")), None)
        versions1 = sum(store.delta_stats(t.id)[1] for t in store.list_tables("bench"))
        results["freshness"] = {
            "p50_s": float(np.percentile(delays, 50)), "p99_s": float(np.percentile(delays, 99)),
            "max_s": float(max(delays)), "samples": len(delays), "pgbench_tps": tps,
            "row_changes_per_s": (versions1 - versions0) / elapsed,
        }
        results["freshness_tail"] = None if args.no_tail else {
            "p50_s": float(np.percentile(tail_delays, 50)), "p99_s": float(np.percentile(tail_delays, 99)),
            "max_s": float(max(tail_delays)), "samples": len(tail_delays),
        }
        progress(f"pgbench done: {tps} tps; freshness p50 {results['freshness']['p50_s']:.3f} s, p99 {results['freshness']['p99_s']:.3f} s")
        if not args.no_tail:
            progress(f"through the in-memory tail: p50 {results['freshness_tail']['p50_s']:.3f} s, "
                     f"p99 {results['freshness_tail']['p99_s']:.3f} s")
        log.flush()
        profile = results["where_the_time_goes"] = checkpoint_profile(work / "serve.log", started, started + elapsed)
        progress("where the time went during the pgbench run (from the service's log):")
        for name in ("checkpoints", "gap_between_ends", "oldest_commit_visible_after", "compaction_lock_held"):
            print(_show(name, profile[name]), flush=True)
        for name, d in profile["phases"].items():
            print(_show("checkpoint phase " + name, d), flush=True)

        if args.idle_seconds > 0:
            progress(f"idle for {args.idle_seconds:.0f} s: measuring how far the safe seq lags the source's position")
            lags = sample_lag(scur, safe, args.idle_seconds)
            results["idle"] = {"seconds": args.idle_seconds, "p50_s": float(np.percentile(lags, 50)),
                               "p99_s": float(np.percentile(lags, 99)), "max_s": float(max(lags)), "samples": len(lags)}
            progress(f"idle lag p50 {results['idle']['p50_s']:.3f} s, p99 {results['idle']['p99_s']:.3f} s")

        n = args.scale * 100_000
        before = safe()
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'htap_bench'")
        walsender = cur.fetchone()[0]
        cpu0 = cpu_seconds(service.pid), cpu_seconds(walsender)
        t0 = time.time()
        scur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1")
        scur.execute("SELECT pg_current_wal_lsn()")
        target = lsn_to_int(scur.fetchone()[0]) - 1
        committed = time.time()
        while safe() < target:
            time.sleep(0.05)
        caught = time.time()
        cpu = cpu_seconds(service.pid) - cpu0[0], cpu_seconds(walsender) - cpu0[1]
        results["ingest"] = {"row_changes": n, "commit_s": committed - t0, "catch_up_s": caught - committed,
                             "row_changes_per_s": n / max(caught - committed, 1e-9), "from_seq": before,
                             "service_cpu_s": cpu[0], "walsender_cpu_s": cpu[1]}
        progress(f"bulk update of {n} rows replicated in {caught - committed:.2f} s after commit (the UPDATE took "
                 f"{committed - t0:.2f} s; CPU from its start: service {cpu[0]:.2f} s, walsender {cpu[1]:.2f} s)")
    finally:
        service.terminate()
        service.wait(timeout=60)
        if args.service_log:
            shutil.copyfile(work / "serve.log", args.service_log)
        store.close()
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'htap_bench'")
        cur.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
        if private:
            localpg.stop(args.work / "pg")

    f, i = results["freshness"], results["ingest"]
    print()
    print(f"{'benchmark':<44} {'measured':>12} {'target':>10}")
    print(f"{'freshness p50 (s) at ' + str(args.rate) + ' tps':<44} {f['p50_s']:>12.3f} {'< 1':>10}")
    print(f"{'freshness p99 (s)':<44} {f['p99_s']:>12.3f} {'< 3':>10}")
    ft = results["freshness_tail"]
    if ft:
        print(f"{'through the tail: visible p50 (s)':<44} {ft['p50_s']:>12.3f} {'<= 0.1':>10}")
        print(f"{'through the tail: visible p99 (s)':<44} {ft['p99_s']:>12.3f} {'<= 0.3':>10}")
    if "read_your_writes" in results:
        r = results["read_your_writes"]
        for mode in ReadYourWrites.MODES:
            d = r[f"planning_{mode}"]
            print(f"{'planning ' + mode + ' p50 / p99 (s)':<44} {d['p50']:>6.3f} / {d['p99']:.3f}")
        print(f"{'read-your-writes misses: readAfter':<44} {r['misses']['read_after']:>6} of {r['rounds']['read_after']}")
        print(f"{'read-your-writes misses: readAfter + readTail':<44} {r['misses']['read_after_tail']:>6} of "
              f"{r['rounds']['read_after_tail']} {'0':>6}")
    print(f"{'pgbench tps achieved':<44} {f['pgbench_tps'] or 0:>12.0f}")
    print(f"{'row changes/s absorbed during the run':<44} {f['row_changes_per_s']:>12,.0f}")
    print(f"{'ingest: bulk row changes/s (one process)':<44} {i['row_changes_per_s']:>12,.0f} {'>= 20k':>10}")
    if "idle" in results:
        d = results["idle"]
        print(f"{'idle: safe-seq lag p50 (s) over ' + format(d['seconds'], '.0f') + ' s':<44} {d['p50_s']:>12.3f}")
        print(f"{'idle: safe-seq lag p99 (s)':<44} {d['p99_s']:>12.3f} {'< 2':>10}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
