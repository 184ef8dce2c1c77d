#!/bin/bash
# session 11 call 4: is the Qwen3-30B AMXBF16 4096-token gap a regression? Session 7's tables ran it at 29-37 ms
# (gate/up 18-23 ms) in six of seven; every table since session 8's call 3 at 42-53 ms (gate/up 27-35).
# Four engines alternated on one host, rotated order, AMXBF16 alone at 4096 tokens, 3 rounds each:
# s7 = 42dfbc3 (session 7's final), m1 = 62b7a66 (session 8 before early start), m2 = 9515423 (session 8's
# final engine), head = e7ea21d+ (this session).
set -o pipefail
C=$PWD/.carry/s11c4; D=/tmp/b; mkdir -p $D
for n in s7 m1 m2 head; do xz -dc $C/kt.$n.xz > $D/kt.$n; chmod +x $D/kt.$n; done
L=$OUT/log.txt
run() { timeout 100 $D/kt.$1 bench --type moe --model qwen3-30b-a3b --methods AMXBF16 --tokens 4096 --min-time 300ms --rounds 3 --phases 2>&1 | grep -E "^AMXBF16|read bandwidth" | sed "s/^/$1 /" | tee -a $L; }
order=(s7 m1 m2 head)
for rep in 0 1 2 3; do
  echo "== rep $rep ($SECONDS s)" | tee -a $L
  for i in 0 1 2 3; do run ${order[$(( (i + rep) % 4 ))]}; done
done
echo "end $SECONDS s" | tee -a $L
