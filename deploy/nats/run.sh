#!/bin/sh
# nats-server with the hub's authorization file, reloaded whenever the hub rewrites it (an
# enrolment or a revocation): with an external server the hub only writes the file and the
# operator must reload (docs/security.md). Polling keeps this to busybox sh and cksum.
set -eu
auth=/etc/nats/auth/nats-authorization.conf
until [ -s "$auth" ]; do echo "waiting for $auth (made by hub-init)"; sleep 1; done
nats-server --config /etc/nats/nats.conf &
pid=$!
trap 'kill -TERM "$pid"; wait "$pid"; exit 0' TERM INT
last=$(cksum < "$auth")
while kill -0 "$pid" 2>/dev/null; do
  sleep 2 &
  wait $! || true
  now=$(cksum < "$auth" 2>/dev/null || echo "$last")
  if [ "$now" != "$last" ]; then
    echo "authorization changed: reloading"
    kill -HUP "$pid"
    last=$now
  fi
done
wait "$pid"
