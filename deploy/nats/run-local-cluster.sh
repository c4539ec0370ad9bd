#!/usr/bin/env bash
# Starts a 3-node JetStream cluster on loopback (clients on 127.0.0.1:4231-4233, routes on 6231-6233)
# with deploy/nats/cluster-node-{1,2,3}.conf and the pinned nats-server, for trying R3 streams and
# node failures on one machine. Ctrl-C (or SIGTERM to the script) stops all three nodes.
#
#   deploy/nats/run-local-cluster.sh [STATE_DIR]      (default: data/local-cluster in the workspace)
#
# Secrets come from the environment (see single.conf). Any that are unset are generated once and kept
# in STATE_DIR/dev-secrets.env (owner-only), because a store encrypted with one key cannot be opened
# with another: delete STATE_DIR to start over. Not for production: the generated secrets sit on disk.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
conf_dir="$root/deploy/nats"
bin="${TOOLLEDGER_NATS_SERVER:-$root/.tools/nats/bin/nats-server}"
state="${1:-$root/data/local-cluster}"

[[ -x "$bin" ]] || { echo "no nats-server at $bin: run scripts/setup" >&2; exit 1; }
mkdir -p "$state"
chmod 700 "$state"

secrets="$state/dev-secrets.env"
names=(TOOLLEDGER_JS_KEY TOOLLEDGER_NATS_ADMIN_PASSWORD TOOLLEDGER_NATS_INGEST_PASSWORD
       TOOLLEDGER_NATS_PROJECTOR_PASSWORD TOOLLEDGER_NATS_EXPORTER_PASSWORD
       TOOLLEDGER_NATS_QUERY_PASSWORD TOOLLEDGER_NATS_RETENTION_PASSWORD
       TOOLLEDGER_NATS_READER_PASSWORD TOOLLEDGER_NATS_PRODUCER_ACME_PASSWORD)
# Variables already set in the environment win over the kept ones.
if [[ -f "$secrets" ]]; then
  while IFS='=' read -r name value; do
    [[ -n "${!name:-}" ]] || export "$name=$value"
  done < "$secrets"
fi
# Any still unset (a first start, or a secrets file from before an identity was added) is generated
# and kept.
generated=0
for name in "${names[@]}"; do
  if [[ -z "${!name:-}" ]]; then
    # nats-server parses a variable's value as configuration: a leading letter keeps it a string.
    value="k$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    ( umask 077; printf '%s=%s\n' "$name" "$value" >> "$secrets" )
    export "$name=$value"
    generated=1
  fi
done
(( generated == 0 )) || echo "generated development secrets in $secrets"

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

for n in 1 2 3; do
  mkdir -p "$state/node-$n"
  "$bin" -c "$conf_dir/cluster-node-$n.conf" -sd "$state/node-$n" -l "$state/node-$n.log" &
  pids+=("$!")
done

# A clustered JetStream node says it is ready once it has found its peers.
for n in 1 2 3; do
  for _ in $(seq 1 150); do
    grep -q "Server is ready" "$state/node-$n.log" 2>/dev/null && break
    kill -0 "${pids[$((n - 1))]}" 2>/dev/null || { echo "node $n exited; see $state/node-$n.log" >&2; exit 1; }
    sleep 0.2
  done
done

cat <<INFO
local cluster running: nats://127.0.0.1:4231, nats://127.0.0.1:4232, nats://127.0.0.1:4233
logs: $state/node-{1,2,3}.log
create the contract with three replicas:
  toolledger init --replicas 3 --tenant acme \\
    --nats-url "nats://admin:\$TOOLLEDGER_NATS_ADMIN_PASSWORD@127.0.0.1:4231"   (secrets: $secrets)
Ctrl-C stops the cluster.
INFO
wait
