# Start/stop a private PostgreSQL cluster for tests (sourced by .ci/run; usable by hand too).
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
PG_DIR=${PG_DIR:-/tmp/geode-ci-pg}
PG_PORT=${PG_PORT:-54329}

pg_start() {
  local run_as=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd -r -m postgres
    run_as=(runuser -u postgres --)
  fi
  pg_stop  # a cluster left running from an earlier run of this script
  rm -rf "$PG_DIR"; mkdir -p "$PG_DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$PG_DIR"
  "${run_as[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U geode --auth=trust >/dev/null
  "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U geode geode_test
  GEODE_TEST_PG_URL="postgresql+psycopg://geode@127.0.0.1:$PG_PORT/geode_test"
  export GEODE_TEST_PG_URL
}

pg_stop() {
  local run_as=()
  [ "$(id -u)" = 0 ] && run_as=(runuser -u postgres --)
  [ -d "$PG_DIR/data" ] && "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast stop >/dev/null 2>&1 || true
}
