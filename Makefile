# One command each: `make demo` (set up + end-to-end demo), `make test` (set up + all tests).
# `make test-unit` runs the unit tier only (no services, under a minute); `make lint` the import layers.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup install demo test test-unit lint bench clean docs docs-figure

# A virtualenv with the dependencies; rebuilt when pyproject.toml changes.
$(BIN)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q ".[test]"
	touch $@

setup: $(BIN)/.deps

# spark-htap is installed editable in setuptools' strict mode: a tree of links to the source files
# (build/__editable__.*) on the path through a .pth file, so an edit is what the tests, Spark's
# Python workers and `htap` run at once, with no reinstall. (The default editable mode's import
# hook would hide the `pyspark_htap` module from the scan Spark uses to find data sources.) A new
# or removed file changes the file list below and relinks the tree on the next make.
PACKAGE_FILES := $(shell git ls-files -co --exclude-standard -- pyproject.toml pyspark_htap.py core app catalog rewrite pushdown connectors replica ingest verify conf 2>/dev/null | md5sum | cut -c1-12)
INSTALLED := $(VENV)/.installed-$(PACKAGE_FILES)
# The link tree gone (`rm -rf build`): install again.
$(if $(wildcard build/__editable__.*),,$(shell rm -f $(VENV)/.installed-*))
$(INSTALLED): $(BIN)/.deps
	@rm -rf build $(VENV)/.installed-*
	@$(BIN)/pip install -q --no-deps -e . --config-settings editable_mode=strict > $(VENV)/install.log 2>&1 \
		|| (cat $(VENV)/install.log; exit 1)
	@touch $@

install: $(INSTALLED)

demo: install
	$(BIN)/htap demo

# The import graph is a DAG of layers (pyproject.toml [tool.importlinter]); checked on the
# installed package, which is what Spark's workers import.
lint: install
	$(BIN)/lint-imports --no-logo

# Every test: the layers, the unit tier, then the tests against private Postgres/MariaDB
# servers and Spark (tests start what they need; see tests/services.py).
# TEST_PROCS parallel pytest processes (pytest-xdist; each starts its own servers); TEST_PROCS=0
# runs in one process.
TEST_PROCS ?= 2
test: lint
	$(BIN)/pytest -q -n $(TEST_PROCS) --durations=25 $(PYTEST_ARGS)

test-unit: install
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/) into site/; its reference and benchmark pages are generated from
# the code and bench/results/ on every build. `.venv/bin/mkdocs serve` serves it with live reload.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The README's figure (docs/img/tpch-sf1.png), from bench/results/tpch-sf1.json; committed.
docs-figure: install
	$(BIN)/python docs/generate.py --readme-figure

clean:
	@if [ -d .htap-demo/pg ] && [ -x $(BIN)/htap ]; then $(BIN)/htap demo --stop; fi
	rm -rf $(VENV) build *.egg-info .htap-demo site

# TPC-H through Spark: spark-htap replica vs Spark JDBC vs static Parquet (README "Benchmarks").
# `make bench-tpch SF=0.1` for a quick run; BENCH_ARGS="--queries 1,6" etc. (python -m bench.tpch --help).
SF ?= 1
.PHONY: bench-tpch
bench-tpch: install
	$(BIN)/python -m bench.tpch --sf $(SF) $(BENCH_ARGS)

# The differential SQL fuzzer (fuzz/): random schemas, rows and queries, each query run on the
# replica route, the source route and plain Spark over a Parquet copy; differences shrunk.
# `make fuzz FUZZ_QUERIES=2000 FUZZ_SEED=7`; FUZZ_ARGS="--no-char --keep" etc. (python -m fuzz --help).
FUZZ_QUERIES ?= 200
FUZZ_SEED ?= 0
.PHONY: fuzz
fuzz: install
	$(BIN)/python -m fuzz --queries $(FUZZ_QUERIES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)
