// Host emulation of kernels/norm.cu's one-pass norms (m_rmsnorm_vec,
// m_rmsnorm_warp, m_gated_rmsnorm_warp) against the general m_rmsnorm and
// m_gated_rmsnorm (within 1e-6 relative: the sums add in another order),
// of m_add_rmsnorm(_vec) against the add then m_rmsnorm(_vec) (bit for bit),
// and of m_conv1d_decode against m_conv1d + m_conv_state (outputs and state
// bit for bit, fresh and continuing sequences).
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <memory>
#include <functional>
using namespace std;
struct dim3 { int x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim;
static std::unique_ptr<std::barrier<>> bar;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static float shflbuf[1024];
void __syncthreads() { bar->arrive_and_wait(); }
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int o) {
	shflbuf[threadIdx.x] = v;
	__syncwarp();
	float r = shflbuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)];
	__syncwarp();
	return r;
}
float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
float block_sum(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : 0.0f;
	return warp_sum(v);
}
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
typedef unsigned short bf16;
float bf2f(bf16 x) { unsigned u = (unsigned)x << 16; float f; memcpy(&f, &u, 4); return f; }
float h2f(unsigned short h) { return (float)*(_Float16 *)&h; }
#define __global__
#define __device__
#define __forceinline__ inline
#define KT_GRID_DEP()
#define __shared__ static
#include "norm_part.cu"

template <class F> void launch(dim3 grid, int nt, F f) {
	blockDim = {nt, 1, 1};
	for (int z = 0; z < grid.z; z++) for (int y = 0; y < grid.y; y++) for (int x = 0; x < grid.x; x++) {
		bar = std::make_unique<std::barrier<>>(nt);
		wbar.clear();
		for (int w = 0; w < nt / 32; w++) wbar.push_back(std::make_unique<std::barrier<>>(32));
		std::vector<std::thread> th;
		for (int t = 0; t < nt; t++) th.emplace_back([&, t, x, y, z] { threadIdx.x = t; blockIdx = {x, y, z}; f(); });
		for (auto &t : th) t.join();
	}
}
int block(int d) { return d >= 1024 ? 256 : d >= 128 ? 128 : 32; } // normBlock
int main() {
	std::mt19937 rng(5);
	std::normal_distribution<float> N(0, 1);
	int bad = 0;
	double worst = 0;
	auto cmp = [&](const char *name, int d, const std::vector<float> &a, const std::vector<float> &b) {
		for (size_t i = 0; i < a.size(); i++) {
			double e = fabs(a[i] - b[i]) / (fabs(b[i]) + 1e-30);
			worst = fmax(worst, e);
			if (e > 1e-6 && fabs(a[i] - b[i]) > 1e-7) { if (bad < 10) printf("%s d=%d [%zu]: %g, general %g\n", name, d, i, a[i], b[i]); bad++; }
		}
	};
	for (int dt : {WT_F32, WT_BF16}) for (auto [rows, d] : std::vector<std::pair<int, int>>{{3, 2048}, {2, 4096}, {5, 512}, {9, 128}, {2, 36}, {3, 1000}}) {
		std::vector<float> x(rows * d), z(rows * d), wf(d), o1(rows * d), o2(rows * d);
		std::vector<bf16> wb(d);
		for (auto &v : x) v = N(rng);
		for (auto &v : z) v = N(rng);
		for (int i = 0; i < d; i++) { wf[i] = N(rng); unsigned u; memcpy(&u, &wf[i], 4); wb[i] = u >> 16; wf[i] = bf2f(wb[i]); }
		const void *w = dt == WT_F32 ? (const void *)wf.data() : (const void *)wb.data();
		launch({rows, 1, 1}, block(d), [&] { m_rmsnorm(o1.data(), x.data(), w, dt, d, 1e-6f); });
		launch({rows, 1, 1}, block(d), [&] { m_rmsnorm_vec(o2.data(), x.data(), w, dt, d, 1e-6f); });
		cmp("m_rmsnorm_vec", d, o2, o1);
		// the fused residual add: bit for bit the add, then the norm
		for (int vec = 0; vec < 2 && d % 4 == 0; vec++) {
			std::vector<float> xa(x), xb(x), ha(rows * d), hb(rows * d);
			for (size_t i = 0; i < xb.size(); i++) xb[i] += z[i];
			if (vec) {
				launch({rows, 1, 1}, block(d), [&] { m_add_rmsnorm_vec(ha.data(), xa.data(), z.data(), w, dt, d, 1e-6f); });
				launch({rows, 1, 1}, block(d), [&] { m_rmsnorm_vec(hb.data(), xb.data(), w, dt, d, 1e-6f); });
			} else {
				launch({rows, 1, 1}, block(d), [&] { m_add_rmsnorm(ha.data(), xa.data(), z.data(), w, dt, d, 1e-6f); });
				launch({rows, 1, 1}, block(d), [&] { m_rmsnorm(hb.data(), xb.data(), w, dt, d, 1e-6f); });
			}
			if (memcmp(xa.data(), xb.data(), xa.size() * 4) || memcmp(ha.data(), hb.data(), ha.size() * 4)) {
				if (bad < 10) printf("m_add_rmsnorm%s d=%d: not bit-identical to the add then the norm\n", vec ? "_vec" : "", d);
				bad++;
			}
		}
		if (d > 512) continue;
		std::fill(o2.begin(), o2.end(), 0.0f);
		launch({(rows + 7) / 8, 1, 1}, 256, [&] { m_rmsnorm_warp(o2.data(), x.data(), w, dt, d, 1e-6f, rows); });
		cmp("m_rmsnorm_warp", d, o2, o1);
		launch({rows, 1, 1}, block(d), [&] { m_gated_rmsnorm(o1.data(), x.data(), z.data(), w, dt, d, 1e-6f); });
		std::fill(o2.begin(), o2.end(), 0.0f);
		launch({(rows + 7) / 8, 1, 1}, 256, [&] { m_gated_rmsnorm_warp(o2.data(), x.data(), z.data(), w, dt, d, 1e-6f, rows); });
		cmp("m_gated_rmsnorm_warp", d, o2, o1);
	}
	printf("norms: %d mismatches (worst relative difference from the general kernels %.3g)\n", bad, worst);
	// Conv: 3 sequences (slots 2, 0, 1), one fresh; a few decode steps.
	const int C = 300, K = 4, layers = 2, layer = 1, S = 3;
	std::vector<float> cw(C * K), st1(3 * layers * (K - 1) * C), st2;
	for (auto &v : cw) v = N(rng);
	for (auto &v : st1) v = N(rng);
	st2 = st1;
	int cbad = 0;
	for (int step = 0; step < 5; step++) {
		int rowseq[S] = {0, 1, 2}, start[S] = {0, 1, 2}, len[S] = {1, 1, 1}, pos[S] = {7 + step, step, 70 + step}, slot[S] = {2, 0, 1};
		std::vector<float> x(S * C), o1(S * C), o2(S * C);
		for (auto &v : x) v = N(rng);
		launch({(C + 127) / 128, S, 1}, 128, [&] { m_conv1d(o1.data(), x.data(), cw.data(), WT_F32, st1.data(), layer, layers, rowseq, start, pos, slot, C, K); });
		launch({(C + 127) / 128, S, 1}, 128, [&] { m_conv_state(st1.data(), x.data(), layer, layers, start, len, pos, slot, C, K); });
		launch({(C + 127) / 128, S, 1}, 128, [&] { m_conv1d_decode(o2.data(), x.data(), cw.data(), WT_F32, st2.data(), layer, layers, start, pos, slot, C, K); });
		if (memcmp(o1.data(), o2.data(), 4 * o1.size()) || memcmp(st1.data(), st2.data(), 4 * st1.size())) cbad++;
	}
	printf("m_conv1d_decode: %d of 5 steps differ from m_conv1d + m_conv_state\n", cbad);
	return bad != 0 || cbad != 0;
}
