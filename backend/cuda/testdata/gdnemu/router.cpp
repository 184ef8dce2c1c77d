// Host emulation of kernels/router.cu's m_router_topk_warp (a warp per row)
// and m_router_topk_reg (the row in registers, E <= 256): ids must equal a
// sequential scan (the k largest, ties to the lower id), weights match the
// CPU's softmax within 4e-6 relative (k = 32 sums the renormalisation in
// another order); m_router_topk_reg's ids and weights equal
// m_router_topk_warp's bit for bit. m_router_group_topk (DeepSeek-V3's
// grouped sigmoid router) against backend/cpu's RouterGroupTopK as a
// sequential scan in the same float32 operations: ids and weights bit for
// bit, on scores with many ties (equal group scores, masked experts picked
// where every eligible biased score is negative), bf16 and f32 biases,
// padding rows.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <random>
#include <memory>
#include <cstring>
#include <functional>
using namespace std;
struct dim3 { int x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
const dim3 blockDim{128, 1, 1}; // m_router_topk (thread per row) is compiled, not run
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static float fbuf[1024];
static int ibuf[1024];
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int o) {
	fbuf[threadIdx.x] = v; __syncwarp();
	float r = fbuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)]; __syncwarp(); return r;
}
int __shfl_xor_sync(unsigned, int v, int o) {
	ibuf[threadIdx.x] = v; __syncwarp();
	int r = ibuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)]; __syncwarp(); return r;
}
float __shfl_sync(unsigned, float v, int l) {
	fbuf[threadIdx.x] = v; __syncwarp();
	float r = fbuf[(threadIdx.x & ~31) | (l & 31)]; __syncwarp(); return r;
}
float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
#define KT_INF INFINITY
#define __global__
#define __device__
#define __forceinline__ inline
#define KT_GRID_DEP()
#define __shared__
float rsm[1 << 14];
typedef float act_t;
inline float ld_act(const act_t *p, long long i) { return p[i]; }
typedef unsigned short bf16;
typedef unsigned int u32;
inline float bf2f(bf16 x) { u32 u = ((u32)x) << 16; float f; memcpy(&f, &u, 4); return f; }
#define WT_F32 0
#define WT_BF16 1
inline float ldw(const void *p, long long i, int dt) { return dt == WT_BF16 ? bf2f(((const bf16 *)p)[i]) : ((const float *)p)[i]; }
inline float sigmoid_d(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
#include "router_part.cu"
int main() {
	std::mt19937 rng(3);
	std::normal_distribution<float> N(0, 1);
	int bad = 0;
	for (auto [E, k, n] : std::vector<std::tuple<int, int, int>>{{128, 8, 6}, {512, 10, 5}, {8, 2, 3}, {40, 8, 4}, {256, 8, 8}, {256, 32, 2}, {200, 8, 5}}) {
		std::vector<float> lg(n * E), w(n * k), w2(n * k);
		std::vector<int> id(n * k), id2(n * k, -7);
		for (auto &x : lg) x = std::round(N(rng) * 4) / 4; // many ties
		auto launch = [&](std::function<void()> f) {
			for (int b = 0; b < (n + 3) / 4; b++) {
				wbar.clear();
				for (int i = 0; i < 4; i++) wbar.push_back(std::make_unique<std::barrier<>>(32));
				std::vector<std::thread> th;
				for (int tt = 0; tt < 128; tt++) th.emplace_back([&, tt, b] { threadIdx.x = tt; blockIdx.x = b; f(); });
				for (auto &x : th) x.join();
			}
		};
		launch([&] { m_router_topk_warp(w.data(), id.data(), lg.data(), n, E, k, 1, nullptr); });
		if (E <= 256) {
			launch([&] { m_router_topk_reg(w2.data(), id2.data(), lg.data(), n, E, k, 1, nullptr); });
			if (id != id2 || memcmp(w.data(), w2.data(), 4 * w.size())) { printf("E=%d k=%d: m_router_topk_reg differs from m_router_topk_warp\n", E, k); bad++; }
		}
		// the last row padding (live = n - 1): ids -1, weights 0; the others as before
		const int live = n - 1;
		std::vector<float> w3(n * k, 7.0f);
		std::vector<int> id3(n * k, 7);
		launch([&] { (E <= 256 ? m_router_topk_reg : m_router_topk_warp)(w3.data(), id3.data(), lg.data(), n, E, k, 1, &live); });
		for (int j = 0; j < n * k; j++) {
			const bool pad = j >= live * k;
			if (pad ? (id3[j] != -1 || w3[j] != 0.0f) : (id3[j] != id[j] || w3[j] != w[j])) { printf("E=%d k=%d live=%d: [%d] = %d %g\n", E, k, live, j, id3[j], w3[j]); bad++; }
		}
		for (int t = 0; t < n; t++) {
			const float *row = &lg[t * E];
			float mx = row[0]; for (int c = 1; c < E; c++) mx = fmaxf(mx, row[c]);
			float sum = 0; for (int c = 0; c < E; c++) sum += (float)exp((double)(row[c] - mx));
			std::vector<int> ref; std::vector<float> rw; float s = 0;
			for (int j = 0; j < k; j++) {
				int best = -1; float bv = 0;
				for (int c = 0; c < E; c++) { bool tk = false; for (int p : ref) tk |= p == c; if (!tk && (best < 0 || row[c] > bv)) { best = c; bv = row[c]; } }
				ref.push_back(best); rw.push_back((float)exp((double)(bv - mx)) / sum); s += rw.back();
			}
			for (int j = 0; j < k; j++) {
				if (id[t * k + j] != ref[j]) { printf("E=%d row %d id[%d] = %d want %d\n", E, t, j, id[t * k + j], ref[j]); bad++; }
				if (fabs(w[t * k + j] - rw[j] / s) > 4e-6 * fabs(rw[j] / s)) { printf("E=%d row %d w[%d] = %g want %g\n", E, t, j, w[t * k + j], rw[j] / s); bad++; }
			}
		}
	}
	// m_router_group_topk: E, groups, eligible groups, k, rows
	for (auto [E, G, TG, k, n] : std::vector<std::tuple<int, int, int, int, int>>{
		     {256, 8, 4, 8, 5}, {384, 1, 1, 8, 3}, {16, 4, 2, 4, 6}, {32, 8, 3, 6, 4}, {24, 1, 1, 6, 3}, {64, 32, 5, 7, 4}}) {
		for (int variant = 0; variant < 3; variant++) {
			// variant 0: f32 bias; 1: bf16 bias, no renorm; 2: negative
			// biases (masked experts at 0 beat the eligible ones), padding row
			const int bdt = variant == 1 ? WT_BF16 : WT_F32, norm = variant != 1, live = variant == 2 ? n - 1 : n;
			const float scale = variant == 0 ? 2.5f : 1.0f;
			std::vector<float> lg(n * E), bf(E);
			std::vector<bf16> bb(E);
			for (auto &x : lg) x = std::round(N(rng) * 2) / 2; // many ties
			for (int e = 0; e < E; e++) {
				float b = std::round(N(rng) * 8) / 64;
				if (variant == 2) b = -2.0f + b;
				u32 u; memcpy(&u, &b, 4); bb[e] = (bf16)(u >> 16);
				bf[e] = variant == 1 ? bf2f(bb[e]) : b;
			}
			const void *bias = variant == 1 ? (const void *)bb.data() : (const void *)bf.data();
			std::vector<float> w(n * k, 7.0f);
			std::vector<int> id(n * k, 7);
			for (int b = 0; b < n; b++) {
				wbar.clear();
				wbar.push_back(std::make_unique<std::barrier<>>(32));
				std::vector<std::thread> th;
				for (int tt = 0; tt < 32; tt++) th.emplace_back([&, tt, b] { threadIdx.x = tt; blockIdx.x = b;
					m_router_group_topk(w.data(), id.data(), lg.data(), bias, bdt, n, E, G, TG, k, norm, scale, variant == 2 ? &live : nullptr); });
				for (auto &x : th) x.join();
			}
			for (int t = 0; t < n; t++) {
				std::vector<int> rid(k, -1);
				std::vector<float> rw(k, 0.0f);
				if (t < live) { // backend/cpu's RouterGroupTopK
					std::vector<float> sv(E), c(E), gs(G);
					for (int e = 0; e < E; e++) { sv[e] = (float)(1 / (1 + exp(-(double)lg[t * E + e]))); c[e] = sv[e] + bf[e]; }
					const int per = E / G;
					for (int g = 0; g < G; g++) {
						float a = -INFINITY, b2 = -INFINITY;
						for (int e = g * per; e < (g + 1) * per; e++) { if (c[e] > a) { b2 = a; a = c[e]; } else if (c[e] > b2) b2 = c[e]; }
						gs[g] = a + b2;
					}
					for (int g = 0; g < G; g++) {
						int better = 0;
						for (int j = 0; j < G; j++) if (gs[j] > gs[g] || (gs[j] == gs[g] && j < g)) better++;
						if (better >= TG) for (int e = g * per; e < (g + 1) * per; e++) c[e] = 0;
					}
					float sum = 0;
					for (int j = 0; j < k; j++) {
						int best = -1;
						for (int e = 0; e < E; e++) {
							bool tk = false; for (int p = 0; p < j; p++) tk |= rid[p] == e;
							if ((best < 0 || c[e] > c[best]) && !tk) best = e;
						}
						rid[j] = best; rw[j] = sv[best]; sum += sv[best];
					}
					for (int j = 0; j < k; j++) { if (norm) rw[j] /= sum + 1e-20f; rw[j] *= scale; }
				}
				for (int j = 0; j < k; j++)
					if (id[t * k + j] != rid[j] || memcmp(&w[t * k + j], &rw[j], 4)) {
						if (bad++ < 10) printf("group router E=%d G=%d TG=%d k=%d variant %d row %d [%d]: id %d weight %.9g, want %d %.9g\n", E, G, TG, k, variant, t, j, id[t * k + j], w[t * k + j], rid[j], rw[j]);
					}
			}
		}
	}
	printf("router: %d mismatches\n", bad);
	return bad != 0;
}
