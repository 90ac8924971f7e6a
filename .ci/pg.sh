# Start/stop a private PostgreSQL cluster for tests (sourced by .ci/run; usable by hand too).
#
# Each pg_start makes its own cluster: a fresh directory (PG_DIR, default a new mktemp -d) and a free loopback
# port (PG_PORT, default one the kernel hands out), so two runs on one machine never share or stop each other's
# cluster. pg_stop stops only the cluster this shell started and removes its directory.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)

_pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_start() {
  local run_as=()
  PG_DIR=${PG_DIR:-$(mktemp -d /tmp/geode-ci-pg.XXXXXX)}
  PG_PORT=${PG_PORT:-$(_pg_free_port)}
  if [ -e "$PG_DIR/data" ]; then
    echo "pg_start: $PG_DIR/data exists (another cluster's?); set PG_DIR to a new directory" >&2
    return 1
  fi
  mkdir -p "$PG_DIR"
  _PG_STARTED=$PG_DIR  # from here on pg_stop cleans it up, even if the start fails half-way
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd -r -m postgres
    run_as=(runuser -u postgres --)
    chown postgres "$PG_DIR"
  fi
  "${run_as[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U geode --auth=trust >/dev/null
  "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U geode geode_test
  GEODE_TEST_PG_URL="postgresql+psycopg://geode@127.0.0.1:$PG_PORT/geode_test"
  export GEODE_TEST_PG_URL
}

pg_stop() {
  # only the cluster this shell's pg_start made (never one found at a well-known path)
  [ -n "${_PG_STARTED:-}" ] || return 0
  local run_as=()
  [ "$(id -u)" = 0 ] && run_as=(runuser -u postgres --)
  "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$_PG_STARTED/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$_PG_STARTED"
  _PG_STARTED=
}
