#!/bin/sh
# The postgres image's entrypoint: on first start, a cluster whose superuser, password and
# database are POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB (the names the official image
# reads), reachable from other containers with a password (scram-sha-256), replication
# included; then postgres, with the arguments given (a leading "postgres" is optional).
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "postgres-entrypoint: POSTGRES_PASSWORD is required" >&2
  exit 1
fi
if [ "${1:-}" = postgres ]; then
  shift
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s' "$POSTGRES_PASSWORD" > "$pw"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --no-locale \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  {
    echo "host all all all scram-sha-256"
    echo "host replication all all scram-sha-256"
  } >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    # A private socket and no TCP: nothing outside (the health check included) may take this
    # short-lived server for the real one.
    init=$(mktemp -d)
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k $init" -w start >/dev/null
    createdb -h "$init" -U "$POSTGRES_USER" "$POSTGRES_DB"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    rmdir "$init"
  fi
  echo "postgres-entrypoint: initialized $PGDATA for $POSTGRES_USER/$POSTGRES_DB"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
