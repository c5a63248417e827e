#!/usr/bin/env bash
# Configure the machine's PostgreSQL and MariaDB for CDC and make sure a JDK is present.
# Idempotent: restarts a server only when a setting has to change. Needs root (CI, dev machines).
set -euo pipefail

log() { printf '[setup] %s\n' "$*"; }
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- JDK (javac compiles the Spark catalog shim; java runs Spark) ---------------------------
if ! command -v javac >/dev/null 2>&1; then
  log "installing a JDK (javac not found)"
  apt_install openjdk-17-jdk-headless
fi

# --- PostgreSQL: wal_level=logical ------------------------------------------------------------
psql_q() { psql -h 127.0.0.1 -U postgres -d postgres -Atqc "$1"; }
pg_start() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main "$1"; }
if ! psql_q 'select 1' >/dev/null 2>&1; then
  log "starting PostgreSQL"
  pg_start start || true
fi
for i in $(seq 1 30); do psql_q 'select 1' >/dev/null 2>&1 && break; sleep 1; done
if [ "$(psql_q 'show wal_level')" != "logical" ]; then
  log "setting wal_level=logical and restarting PostgreSQL"
  psql_q "alter system set wal_level = 'logical'"
  psql_q "alter system set max_replication_slots = 64"
  psql_q "alter system set max_wal_senders = 64"
  pg_start restart
  for i in $(seq 1 30); do psql_q 'select 1' >/dev/null 2>&1 && break; sleep 1; done
fi
psql_q "select 1 from pg_database where datname='test'" | grep -q 1 || psql_q "create database test"
log "PostgreSQL wal_level=$(psql_q 'show wal_level')"

# --- MariaDB: binlog in ROW format with full row images ----------------------------------------
my_q() { mysql -uroot -h127.0.0.1 -N -B -e "$1"; }
if ! my_q 'select 1' >/dev/null 2>&1; then
  log "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  for i in $(seq 1 30); do my_q 'select 1' >/dev/null 2>&1 && break; sleep 1; done
fi
if [ "$(my_q "select @@log_bin")" != "1" ] || [ "$(my_q "select @@binlog_format")" != "ROW" ]; then
  log "enabling the MariaDB binlog (ROW, FULL) and restarting MariaDB"
  conf=/etc/mysql/conf.d
  [ -d /etc/mysql/mariadb.conf.d ] && conf=/etc/mysql/mariadb.conf.d
  mkdir -p "$conf"
  cat > "$conf/60-spark-htap-binlog.cnf" <<'CNF'
[mysqld]
server_id = 1
log_bin = mysql-bin
binlog_format = ROW
binlog_row_image = FULL
CNF
  grep -q "includedir $conf" /etc/mysql/my.cnf || printf '\n!includedir %s/\n' "$conf" >> /etc/mysql/my.cnf
  mysqladmin -uroot -h127.0.0.1 shutdown || true
  for i in $(seq 1 60); do pidof mariadbd mysqld >/dev/null 2>&1 || break; sleep 1; done
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for i in $(seq 1 60); do my_q 'select 1' >/dev/null 2>&1 && break; sleep 1; done
fi
my_q "create database if not exists test"
log "MariaDB log_bin=$(my_q 'select @@log_bin') binlog_format=$(my_q 'select @@binlog_format')"
