"""Build the Java catalog shim from its source, and the Spark configuration that uses it.

The shim is compiled with `javac` against the jars of the installed pyspark wheel on first use
and cached under ~/.cache/spark-htap (or $HTAP_CACHE_DIR), keyed by a hash of the sources and
the pyspark version: nothing compiled is ever committed or shipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from htap.errors import ShimBuildError

log = logging.getLogger(__name__)

JAVA_SOURCES = Path(__file__).parent / "java"
CATALOG_CLASS = "io.sparkhtap.HtapCatalog"
EXTENSIONS_CLASS = "io.sparkhtap.HtapExtensions"  # one snapshot per query
CACHE_ENV = "HTAP_CACHE_DIR"
JDK_HINT = "install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"


def find_javac() -> str:
    """The javac to use: $JAVA_HOME/bin/javac, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "javac"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise ShimBuildError(f"JAVA_HOME={home} has no bin/javac: {JDK_HINT}")
    javac = shutil.which("javac")
    if not javac:
        raise ShimBuildError(f"no Java compiler (javac) found to build the spark-htap catalog shim: {JDK_HINT}")
    return javac


def pyspark_jars() -> Path:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("spark-sql_*.jar")):
        raise ShimBuildError(f"no Spark jars under {jars}: reinstall pyspark (pip install 'pyspark>=4.3,<4.4')")
    return jars


def _sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def _fingerprint() -> str:
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for src in _sources():
        h.update(src.name.encode())
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "spark-htap")


def shim_jar() -> Path:
    """Path of the compiled shim jar, compiling it first when the cache has none for this build."""
    jar = cache_dir() / f"spark-htap-shim-{_fingerprint()}.jar"
    if jar.is_file():
        return jar
    javac = find_javac()
    jars = pyspark_jars()
    log.info("compiling the spark-htap catalog shim with %s into %s", javac, jar)
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes), "-cp", str(jars / "*"), *map(str, _sources())]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ShimBuildError(f"javac failed to compile the catalog shim:\n{result.stderr.strip()}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: spark-htap\n")
            for cls in sorted(classes.rglob("*.class")):
                z.write(cls, cls.relative_to(classes).as_posix())
        os.replace(partial, jar)  # atomic: concurrent builders never see half a jar
    return jar


def spark_conf(catalog: str, config_path: str | os.PathLike, source: str | None = None) -> dict[str, str]:
    """The Spark settings a session needs to read HTAP tables as `<catalog>.<schema>.<table>`."""
    conf = {
        "spark.jars": str(shim_jar()),
        "spark.sql.extensions": EXTENSIONS_CLASS,
        f"spark.sql.catalog.{catalog}": CATALOG_CLASS,
        f"spark.sql.catalog.{catalog}.config": str(Path(config_path).resolve()),
        # Joins between HTAP tables of one source run inside one replica scan (off by default in
        # Spark): SupportsPushDownJoin in the shim's scan builder.
        "spark.sql.optimizer.datasourceV2JoinPushdown": "true",
        # Where DSv2 cannot carry a query (semi/anti joins from EXISTS / IN / NOT IN, aggregates
        # between joins, scalar subqueries), a whole subtree over HTAP tables of one source and
        # snapshot becomes one scan (io.sparkhtap.HtapSubtreeStrategy); "false" turns it off.
        "spark.htap.wholeQueryPushdown": "true",
        # Executors and the planning worker must run a Python that has spark-htap installed.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if source:
        conf[f"spark.sql.catalog.{catalog}.source"] = source
    return conf


def spark_session(catalog: str, config_path: str | os.PathLike, source: str | None = None, **extra: str):
    """A local SparkSession configured for spark-htap (for the demo, tests and notebooks)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(extra.pop("master", "local[2]"))
        .appName("spark-htap")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
    )
    for key, value in {**spark_conf(catalog, config_path, source), **extra}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextlib.contextmanager
def spark_confs(spark, values: dict[str, str]):
    """Spark SQL confs set for a block, then what was there before restored. Not `unset`: that
    drops a value the session was built with (DSv2 join pushdown on, from htap's spark_conf) to
    Spark's own default, and every later query of a shared session would run with it."""
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
