// Host emulation of kernels/attnf32.cu (split-K decode attention over the
// float32 paged KV cache, then the merge of the splits): one std::thread per
// CUDA thread. Rows of several sequences (decode rows and a prefill span,
// scattered pages, positions across tile and page boundaries, more splits
// than tiles) for D = 128 and 256, G = 2..16, S = 1, 3, 8, 256, against a
// float64 reference: relative error ≤ 1e-5 and nothing written outside the
// output.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <memory>
#include <algorithm>
using namespace std;
struct dim3 { int x = 0, y = 0, z = 0; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
thread_local dim3 threadIdx, blockIdx;
static std::unique_ptr<std::barrier<>> bar;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static float shflbuf[1024];
void __syncthreads() { bar->arrive_and_wait(); }
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int o) {
	shflbuf[threadIdx.x] = v; __syncwarp();
	float r = shflbuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)]; __syncwarp(); return r;
}
#define KT_INF INFINITY
float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
static int blockDimx = 128;
float block_sum(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDimx >> 5;
	v = warp_sum(v); __syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : 0.0f;
	return warp_sum(v);
}
float block_max(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDimx >> 5;
	v = warp_max(v); __syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : -KT_INF;
	return warp_max(v);
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define KT_GRID_DEP()
#define __shared__ static
#define AS_TP 32
#define AS_NT 128
#define AM_NT 256
alignas(16) static float attsm[1 << 15];
void cp_async16(float *smem, const float *gmem) { memcpy(smem, gmem, 16); }
void cp_async_commit() {}
void cp_async_wait1() {}
#include "attn_part.cu"
template <class F> void launch(dim3 grid, F f, int nt = AS_NT) {
	blockDimx = nt;
	for (int z = 0; z < grid.z; z++) for (int y = 0; y < grid.y; y++) for (int x = 0; x < grid.x; x++) {
		bar = std::make_unique<std::barrier<>>(nt);
		wbar.clear();
		for (int w = 0; w < nt / 32; w++) wbar.push_back(std::make_unique<std::barrier<>>(32));
		std::vector<std::thread> th;
		for (int t = 0; t < nt; t++) th.emplace_back([&, t, x, y, z] { threadIdx.x = t; blockIdx = {x, y, z}; f(); });
		for (auto &t : th) t.join();
	}
}
int bad = 0;
double worst = 0;
void run(int D, int heads, int kvh, int S) {
	mt19937 rng(D * 1000 + heads * 10 + S);
	normal_distribution<float> nd;
	const int ps = 16, npages = 64;
	// sequences: a decode row at 70 (slot 0), a 5-row prefill span at 29..33 (slot 1), a decode row at 0 (slot 2)
	vector<int> pos = {70, 29, 30, 31, 32, 33, 0}, rowseq = {0, 1, 1, 1, 1, 1, 2};
	vector<int> page_off = {0, 8, 16};
	vector<int> pages(24);
	vector<int> perm(npages);
	for (int i = 0; i < npages; i++) perm[i] = i;
	shuffle(perm.begin(), perm.end(), rng);
	for (int i = 0; i < 24; i++) pages[i] = perm[i];
	const int n = pos.size(), kvw = kvh * D;
	vector<float> kc((size_t)npages * ps * kvw), vc(kc.size()), q((size_t)n * heads * D);
	for (auto &v : kc) v = nd(rng);
	for (auto &v : vc) v = nd(rng);
	for (auto &v : q) v = nd(rng);
	const float scale = 1.0f / sqrtf((float)D);
	vector<float> out((size_t)n * heads * D + 16, NAN), pacc((size_t)n * heads * S * D, NAN), pml((size_t)n * heads * S * 2, NAN);
	launch({n, kvh, S}, [&] {
		if (D == 128) m_attn_split128(out.data(), pacc.data(), pml.data(), q.data(), kc.data(), vc.data(), pos.data(), rowseq.data(), page_off.data(), pages.data(), ps, heads, kvh, scale, S);
		else m_attn_split256(out.data(), pacc.data(), pml.data(), q.data(), kc.data(), vc.data(), pos.data(), rowseq.data(), page_off.data(), pages.data(), ps, heads, kvh, scale, S);
	});
	if (S > 1) launch({n, heads, 1}, [&] {
		if (D == 128) m_attn_merge128(out.data(), pacc.data(), pml.data(), heads, S);
		else m_attn_merge256(out.data(), pacc.data(), pml.data(), heads, S);
	}, AM_NT);
	const int G = heads / kvh;
	for (int t = 0; t < n; t++) for (int h = 0; h < heads; h++) {
		int kh = h / G, L = pos[t] + 1;
		vector<double> sc(L);
		double mx = -1e300;
		for (int p = 0; p < L; p++) {
			long long r = ((long long)pages[page_off[rowseq[t]] + p / ps] * ps + p % ps) * kvw + kh * D;
			double d = 0;
			for (int i = 0; i < D; i++) d += (double)q[((size_t)t * heads + h) * D + i] * kc[r + i];
			sc[p] = d * scale; mx = max(mx, sc[p]);
		}
		double l = 0;
		for (auto &v : sc) { v = exp(v - mx); l += v; }
		double num = 0, den = 0;
		for (int i = 0; i < D; i++) {
			double o = 0;
			for (int p = 0; p < L; p++) {
				long long r = ((long long)pages[page_off[rowseq[t]] + p / ps] * ps + p % ps) * kvw + kh * D;
				o += sc[p] * vc[r + i];
			}
			o /= l;
			double got = out[((size_t)t * heads + h) * D + i];
			num += (got - o) * (got - o); den += o * o;
			if (!(fabs(got - o) < 1e-3)) { if (bad++ < 5) printf("D=%d heads=%d/%d S=%d row %d head %d dim %d: got %g want %g\n", D, heads, kvh, S, t, h, i, got, o); }
		}
		double e = sqrt(num / den);
		worst = max(worst, e);
		if (!(e <= 1e-5)) { if (bad++ < 5) printf("D=%d heads=%d/%d S=%d row %d head %d: rel err %g\n", D, heads, kvh, S, t, h, e); }
	}
	for (size_t j = (size_t)n * heads * D; j < out.size(); j++) if (!std::isnan(out[j])) { if (bad++ < 5) printf("wrote past the output\n"); }
}
int main() {
	for (int S : {1, 3, 8}) {
		run(128, 16, 2, S);
		run(256, 16, 2, S);
	}
	run(128, 16, 2, 256); // splits past the last tile: empty partials
	run(128, 32, 2, 3); // G = 16
	run(256, 8, 4, 3);  // G = 2
	run(128, 12, 3, 1); // G = 4
	printf("attnf32: %d mismatches (worst relative L2 %.2e)\n", bad, worst);
	return bad != 0;
}
