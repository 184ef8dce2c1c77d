// Host emulation of kernels/sample.cu's picks (pick_row with one block per
// row, as m_pick_rows and, before sm_90, m_pick run it): one std::thread
// per CUDA thread, barriers for __syncthreads and the warp collectives.
// The exponentials are the host's expf on both sides, so every pick must
// equal a sort-based reference of the sampler's semantics (engine/sample):
// the best-first prefix that top-k, top-p and min-p keep, drawn in
// vocabulary order at u; and the logprob the raw row's log-softmax.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>
using namespace std;
typedef unsigned int u32;
typedef unsigned long long u64;
struct dim3 { int x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
static std::unique_ptr<std::barrier<>> bar;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static u64 xbuf[1024];
void __syncthreads() { bar->arrive_and_wait(); }
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
// lane_get publishes v and returns lane src's value (all 32 lanes call it).
template <class T> T lane_get(T v, int src) {
	static_assert(sizeof(T) <= 8);
	u64 b = 0;
	memcpy(&b, &v, sizeof(T));
	xbuf[threadIdx.x] = b;
	__syncwarp();
	u64 o = xbuf[(threadIdx.x & ~31) | (src & 31)];
	__syncwarp();
	T r;
	memcpy(&r, &o, sizeof(T));
	return r;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int o) { return lane_get(v, (threadIdx.x & 31) ^ o); }
template <class T> T __shfl_sync(unsigned, T v, int l) { return lane_get(v, l); }
template <class T> T __shfl_up_sync(unsigned, T v, int o) {
	int l = threadIdx.x & 31;
	T r = lane_get(v, l >= o ? l - o : l);
	return r;
}
unsigned __ballot_sync(unsigned, int p) {
	unsigned m = 0;
	for (int l = 0; l < 32; l++) m |= (lane_get<int>(p != 0, l) ? 1u : 0u) << l;
	return m;
}
int __ffs(int x) { return __builtin_ffs(x); }
int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
template <class T> T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
int atomicMax(int *p, int v) {
	int o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
	return o;
}
int atomicMin(int *p, int v) {
	int o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (o > v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
	return o;
}
u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
float __fmul_rn(float a, float b) { return a * b; }
float __fsub_rn(float a, float b) { return a - b; }
float __fadd_rn(float a, float b) { return a + b; }
#define KT_INF INFINITY
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define KT_GRID_DEP()
#define __shared__ static
float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
float block_max(float v, float *scratch) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = 1024 >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < nw ? scratch[lane] : -KT_INF;
	return warp_max(v);
}
#include "pick_part.cu"

// launch runs one block of 1024 threads per row.
template <class F> void launch(int rows, F f) {
	for (int x = 0; x < rows; x++) {
		bar = std::make_unique<std::barrier<>>(1024);
		wbar.clear();
		for (int w = 0; w < 32; w++) wbar.push_back(std::make_unique<std::barrier<>>(32));
		std::vector<std::thread> th;
		for (int t = 0; t < 1024; t++) th.emplace_back([&, t, x] { threadIdx.x = t; blockIdx = {x, 0, 0}; f(); });
		for (auto &t : th) t.join();
	}
}

struct Draw { float t; int k; double p; float m; };

// ref is the sampler's pick: the probabilities as the kernel computes them,
// the best-first prefix the filters keep, the draw in id order at u.
int ref(const float *x, int V, const Draw &d, double u, double *margin) {
	*margin = 1;
	int am = -1;
	float mx = -INFINITY;
	for (int i = 0; i < V; i++) if (x[i] > mx) mx = x[i], am = i;
	if (!(d.t > 0) || d.k == 1 || am < 0) return am;
	const float inv = 1.0f / d.t, mxs = inv == 1.0f ? mx : mx * inv;
	vector<float> p(V);
	for (int i = 0; i < V; i++) {
		float s = inv == 1.0f ? x[i] : x[i] * inv;
		float e = expf(s - mxs);
		p[i] = e == e ? e : 0.0f;
	}
	vector<int> order;
	for (int i = 0; i < V; i++) if (p[i] > 0) order.push_back(i);
	stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
	size_t L = order.size();
	if (d.k > 0 && d.k < V) L = min(L, (size_t)d.k);
	if (d.p < 1) {
		double tot = 0, cum = 0;
		for (size_t n = 0; n < L; n++) tot += p[order[n]];
		for (size_t n = 0; n < L; n++) {
			cum += p[order[n]];
			if (cum >= d.p * tot) {
				if (fabs(cum - d.p * tot) < 1e-9 * tot || fabs(cum - p[order[n]] - d.p * tot) < 1e-9 * tot) *margin = 0;
				L = n + 1;
				break;
			}
		}
	}
	if (d.m > 0) {
		size_t n = 0;
		while (n < L && p[order[n]] >= d.m) n++;
		L = n;
	}
	vector<int> set(order.begin(), order.begin() + L);
	sort(set.begin(), set.end());
	double mass = 0;
	for (int i : set) mass += p[i];
	double r = u * mass, acc = 0;
	int tok = -1;
	for (int i : set) {
		*margin = min(*margin, fabs(acc - r) / mass);
		acc += p[i];
		if (acc > r && tok < 0) tok = i;
	}
	return tok >= 0 ? tok : (set.empty() ? am : set.back());
}

int main() {
	std::mt19937 rng(7);
	std::normal_distribution<float> N(0, 1);
	std::uniform_real_distribution<double> U(0, 1);
	const Draw draws[] = {{0, 0, 1, 0},        {1, 0, 1, 0},     {0.7f, 20, 1, 0},  {1, 0, 0.9, 0},    {0.6f, 40, 0.95, 0.05f},
			      {1.3f, 0, 1, 0.1f}, {1, 1000, 0.5, 0}, {0.8f, 0, 0.3, 0}, {0.7f, 20, 0.8, 0}, {1.1f, 0, 0.97, 0.01f},
			      {1, 3000, 1, 0}};
	const int nd = sizeof(draws) / sizeof(draws[0]);
	int bad = 0, same = 0, total = 0, ambiguous = 0;
	// every row shape at an odd size, and the tied rows at a larger one
	// (about 4 s a row here: 1024 host threads per block)
	for (int V : {3001, 12000}) {
		for (int kind = V == 3001 ? 0 : 3; kind < 4; kind++) {
			const int B = nd;
			vector<float> x((size_t)B * V), out(2 * B);
			vector<PickParams> ps(B);
			vector<double> us(B);
			for (int b = 0; b < B; b++) {
				float *row = &x[(size_t)b * V];
				for (int i = 0; i < V; i++) {
					float z = N(rng);
					row[i] = kind == 0 ? 3 * z : kind == 1 ? z : kind == 2 ? 0.3f * z : roundf(4 * z) / 2;
				}
				if (kind == 1) row[rng() % V] = 12;
				const Draw &d = draws[b];
				us[b] = U(rng);
				PickParams q = {};
				if (d.t > 0 && d.k != 1) {
					q.inv_t = 1.0f / d.t, q.top_k = d.k, q.min_p = d.m, q.top_p = d.p, q.u = us[b];
				}
				ps[b] = q;
			}
			launch(B, [&] { m_pick_rows(out.data(), x.data(), V, ps.data()); });
			for (int b = 0; b < B; b++) {
				const float *row = &x[(size_t)b * V];
				double margin;
				int want = ref(row, V, draws[b], us[b], &margin);
				int got = (int)out[2 * b];
				total++;
				if (got == want) same++;
				else if (margin < 1e-9) ambiguous++;
				else {
					bad++;
					printf("V=%d kind %d draw %d: picked %d, want %d (margin %.3g)\n", V, kind, b, got, want, margin);
				}
				float mx = -INFINITY;
				for (int i = 0; i < V; i++) mx = fmaxf(mx, row[i]);
				double se = 0;
				for (int i = 0; i < V; i++) se += (double)expf(row[i] - mx);
				double lp = (double)row[got] - mx - log(se);
				if (fabs(out[2 * b + 1] - lp) > 1e-5 * fmax(1, fabs(lp))) {
					bad++;
					printf("V=%d kind %d draw %d: logprob %g, want %g\n", V, kind, b, out[2 * b + 1], lp);
				}
			}
		}
	}
	printf("picks: %d of %d identical to the reference (%d at a rounding boundary), %d wrong\n", same, total, ambiguous, bad);
	return bad ? 1 : 0;
}
