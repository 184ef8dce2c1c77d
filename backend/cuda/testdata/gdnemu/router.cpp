// Host emulation of kernels/router.cu's m_router_topk_warp (a warp per row)
// and m_router_topk_reg (the row in registers, E <= 256): ids must equal a
// sequential scan (the k largest, ties to the lower id), weights match the
// CPU's softmax within 4e-6 relative (k = 32 sums the renormalisation in
// another order); m_router_topk_reg's ids and weights equal
// m_router_topk_warp's bit for bit.
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
	printf("router: %d mismatches\n", bad);
	return bad != 0;
}
