#!/bin/sh
# Host emulation of kernels/model.cu's m_gdn_chunk, m_gdn_commit,
# m_gdn_decode and m_router_topk_warp, gemv.cu's m_gemv_bf16 and attnf32.cu (no GPU
# needed): one std::thread per CUDA thread, barriers for __syncthreads and
# __syncwarp. Checks the chunked rule against a float64 recurrent reference
# and that a prompt split into pieces gives bit-identical outputs and state;
# router ids against a sequential scan with many ties.
# Usage: sh backend/cuda/testdata/gdnemu/run.sh   (needs g++ with C++20)
set -e
d=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
python3 - "$d/../../kernels/model.cu" "$tmp/gdn_part.cu" <<'P'
import sys
s = open(sys.argv[1]).read()
a = s.index('#define GDN_CHUNK'); b = s.index('// m_split_bf16')
open(sys.argv[2], 'w').write(s[a:b].replace('extern "C" ', '').replace('extern __shared__ float sm[];', ''))
P
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/emu" "$d/emu.cpp"
"$tmp/emu"
"$tmp/emu" 1 2 128 128 # the large models' head size (m_gdn_decode's 16 keys per thread)
"$tmp/emu" 2 2 20 40   # a key head size that is no multiple of 8
python3 - "$d/../../kernels/model.cu" "$tmp/router_part.cu" <<'P'
import sys
s = open(sys.argv[1]).read()
a = s.index('extern "C" __global__ void m_router_topk_warp'); b = s.index('// Routed experts.')
open(sys.argv[2], 'w').write(s[a:b].replace('extern "C" ', '').replace('extern __shared__ float rsm[];', ''))
P
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/router" "$d/router.cpp"
"$tmp/router"
python3 - "$d/../../kernels/gemv.cu" "$tmp/gemv_part.cu" <<'P2'
import sys
s = open(sys.argv[1]).read()
a = s.index('// GEMV_EMU_BEGIN')
open(sys.argv[2], 'w').write(s[a:].replace('extern "C" ', '').replace('#pragma unroll', ''))
P2
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/gemv" "$d/gemv.cpp"
"$tmp/gemv"
python3 - "$d/../../kernels/attnf32.cu" "$tmp/attn_part.cu" <<'P3'
import re, sys
s = open(sys.argv[1]).read()
a = s.index('// ATTNF32_EMU_BEGIN')
s = s[a:].replace('extern "C" ', '').replace('extern __shared__ __attribute__((aligned(16))) float attsm[];', '')
open(sys.argv[2], 'w').write(re.sub(r'#pragma unroll( \d+)?', '', s))
P3
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/attn" "$d/attn.cpp"
"$tmp/attn"

python3 - "$d/../../kernels/fp8.cu" "$tmp/fp8_part.cu" <<'P3'
import sys
s = open(sys.argv[1]).read()
s = s.replace('extern __shared__ float fxs[];', '').replace('extern __shared__ float fhs[];', '')
open(sys.argv[2], 'w').write(s.replace('#pragma unroll 2', '').replace('#pragma unroll', ''))
P3
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/fp8" "$d/fp8.cpp"
"$tmp/fp8"
rm -rf "$tmp"
