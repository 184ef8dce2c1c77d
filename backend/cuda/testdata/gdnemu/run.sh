#!/bin/sh
# Host emulation of gdn.cu's m_gdn_chunk, m_gdn_commit, m_gdn_decode and
# conv1d kernels, router.cu's routers, norm.cu's norms, gemv.cu's
# m_gemv_bf16, attnf32.cu and mla.cu (no GPU needed): one std::thread per CUDA
# thread, barriers for __syncthreads and __syncwarp. Checks the chunked
# rule against a float64 recurrent reference and that a prompt split into
# pieces or run as decode steps (m_gdn_decode) gives bit-identical outputs
# and state; router ids against a sequential scan with many ties; the
# one-pass norms against the general ones; m_conv1d_decode bit for bit;
# sample.cu's picks against a sort-based reference of the sampler; the
# grouped router bit for bit against the CPU's scan; multi-head latent
# attention against transformers' expanded form in float64.
# Usage: sh backend/cuda/testdata/gdnemu/run.sh   (needs g++ with C++20)
set -e
d=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
python3 - "$d/../../kernels/gdn.cu" "$tmp/gdn_part.cu" <<'P'
import sys
s = open(sys.argv[1]).read()
a = s.index('#define GDN_CHUNK')
open(sys.argv[2], 'w').write(s[a:].replace('extern "C" ', '').replace('extern __shared__ float sm[];', ''))
P
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/emu" "$d/emu.cpp"
"$tmp/emu"
"$tmp/emu" 1 2 128 128 # the large models' head size (m_gdn_decode's 16 keys per thread)
"$tmp/emu" 2 2 20 40   # a key head size that is no multiple of 8
python3 - "$d/../../kernels/router.cu" "$tmp/router_part.cu" <<'P'
import sys
s = open(sys.argv[1]).read()
a = s.index('// router_pad_row:')
open(sys.argv[2], 'w').write(s[a:].replace('extern "C" ', '').replace('extern __shared__ float rsm[];', ''))
P
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/router" "$d/router.cpp"
"$tmp/router"
python3 - "$d/../../kernels" "$tmp/norm_part.cu" <<'P1'
import sys
k = sys.argv[1]
def cut(f, a, b=None):
	s = open(k + '/' + f).read()
	i = s.index(a)
	return s[i:s.index(b, i)] if b else s[i:]
part = cut('common.cuh', 'typedef float act_t;', '__device__ __forceinline__ float h2f') + \
	cut('common.cuh', '// ldw reads element i', '// split_bf16 writes') + \
	cut('norm.cu', '// rmsnorm_row: block blockIdx.x') + cut('gdn.cu', '// m_conv1d: out[t, c]', '// m_delta_gates:')
open(sys.argv[2], 'w').write(part.replace('extern "C" ', ''))
P1
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/norm" "$d/norm.cpp"
"$tmp/norm"
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
python3 - "$d/../../kernels/sample.cu" "$tmp/pick_part.cu" <<'P4'
import re, sys
s = open(sys.argv[1]).read()
s = s.replace('extern "C" ', '').replace('PICK_CLUSTER m_pick', 'm_pick')
open(sys.argv[2], 'w').write(re.sub(r'#pragma unroll( \d+)?', '', s))
P4
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/pick" "$d/pick.cpp"
"$tmp/pick"
rm -rf "$tmp"
python3 - "$d/../../kernels/mla.cu" "$tmp/mla_part.cu" <<'P5'
import re, sys
s = open(sys.argv[1]).read()
s = s[s.index('// MLA_EMU_BEGIN'):].replace('extern "C" ', '').replace('extern __shared__ float mlasm[];', '')
open(sys.argv[2], 'w').write(re.sub(r'#pragma unroll( \d+)?', '', s))
P5
g++ -std=c++20 -O1 -pthread -I"$tmp" -o "$tmp/mla" "$d/mla.cpp"
"$tmp/mla"
