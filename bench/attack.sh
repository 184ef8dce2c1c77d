#!/usr/bin/env bash
# Hostile-input soak: kt serve on the bundled trained model (tokenizer, an
# API key, address space capped at CAP) while CLIENTS ordinary clients run
# the load mix and ATTACKERS clients send the attack mix of kt bench --type
# load --attackers (8000-property schemas, 1000-prompt logprob batches, 4 MB
# prompts of spaces, 100000-deep JSON, malformed bodies, slowloris, idle
# connections, slow bodies). Every ordinary request must be served, every
# attack refused (4xx) or cut, and the server must stay within CAP.
#
#   bench/attack.sh                        # any machine; 3 minutes
#   DURATION=90s ATTACKERS=4 bench/attack.sh
#
# Settings: CLIENTS (8), ATTACKERS (8), DURATION (3m), CAP (4G), PORT (30223).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CLIENTS=${CLIENTS:-8} ATTACKERS=${ATTACKERS:-8} DURATION=${DURATION:-3m} CAP=${CAP:-4G} PORT=${PORT:-30223}
MODEL=${MODEL:-$ROOT/testdata/models/qwen3moe-trained}
need "$KT"
log=$(mktemp)
prlimit --as="$(numfmt --from=iec "$CAP")" "$KT" serve --model-path "$MODEL" --port "$PORT" --api-key soak \
  --max-running-requests 16 --log-level warning >"$log" 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.5; done
echo "== $CLIENTS clients and $ATTACKERS attackers, $DURATION, address space capped at $CAP"
rc=0
"$KT" bench --type load --base-url "http://127.0.0.1:$PORT" --api-key soak --clients "$CLIENTS" \
  --attackers "$ATTACKERS" --duration "$DURATION" --max-tokens 32 || rc=$?
kill -0 $server 2>/dev/null && echo "server alive after the run" || { echo "server died:"; tail -5 "$log"; rc=1; }
exit $rc
