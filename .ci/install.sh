#!/usr/bin/env bash
# Install what the tests need on a fresh machine: a JDK (Spark, the catalog shim), the
# PostgreSQL and MariaDB server packages (the tests start private instances of both; the
# machine's own servers are neither used nor reconfigured) and the PostgreSQL JDBC driver (Spark's
# own JDBC source, an oracle of some tests). Idempotent; needs root to install.
set -euo pipefail

log() { printf '[install] %s\n' "$*"; }
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
{ [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } && command -v mariadb-install-db >/dev/null 2>&1 \
  || missing+=(mariadb-server)
command -v make >/dev/null 2>&1 || missing+=(make)
# Spark's own JDBC source is an oracle of some tests (CHAR(n) answers) and of bench.tpch.
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "[install] need root to install ${missing[*]} (apt-get)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
log "javac: $(javac -version 2>&1); postgres: $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | head -1); mariadbd: $(command -v mariadbd || ls /usr/sbin/mariadbd)"
