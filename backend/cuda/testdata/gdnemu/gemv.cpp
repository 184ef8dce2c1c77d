// Host emulation of kernels/gemv.cu's m_gemv_bf16 (16 outputs per block,
// GEMV_WARPS warps splitting K, mma.sync m16n8k16 emulated from the PTX
// fragment layouts): for n = 1..8 rows, O not a multiple of 16 and K = 8·odd,
// every output must match a float64 reference of the split arithmetic
// (x = hi + lo, two bf16 parts) within 1e-6 relative to Σ|x·w|, the exact
// float32 product within 2e-5, and no element outside the n×O output may
// be written (m_gemv_bf16 and m_gemv_bf16_wide). groupCheck: m_gemv_bf16_group equals separate
// launches bit for bit.
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
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
thread_local dim3 threadIdx, blockIdx;
static std::unique_ptr<std::barrier<>> bar;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
void __syncthreads() { bar->arrive_and_wait(); }
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
typedef unsigned short bf16;
typedef unsigned int u32;
float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
float bf2f(bf16 x) { return __uint_as_float(((u32)x) << 16); }
bf16 f2bf(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}
#define GEMV_WARPS 8
#define GEMV_WIDE_WARPS 16
#define GEMV_U 4
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define KT_GRID_DEP()
#define __shared__ static
// mma emulation: every lane posts its fragments, then computes its four
// outputs from the whole tiles (float32 sums in k order).
static u32 fa[GEMV_WIDE_WARPS][32][4], fb[GEMV_WIDE_WARPS][32][2];
void mma_bf16_16816(float *c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	int w = threadIdx.x / 32, lane = threadIdx.x & 31;
	fa[w][lane][0] = a0; fa[w][lane][1] = a1; fa[w][lane][2] = a2; fa[w][lane][3] = a3;
	fb[w][lane][0] = b0; fb[w][lane][1] = b1;
	__syncwarp();
	auto A = [&](int r, int k) { // row r, col k of the 16x16 tile
		int g = r % 8, q = (k % 8) / 2, reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
		u32 v = fa[w][g * 4 + q][reg];
		return bf2f((bf16)(k % 2 ? v >> 16 : v & 0xffff));
	};
	auto B = [&](int k, int col) {
		int q = (k % 8) / 2, reg = k >= 8 ? 1 : 0;
		u32 v = fb[w][col * 4 + q][reg];
		return bf2f((bf16)(k % 2 ? v >> 16 : v & 0xffff));
	};
	int g = lane / 4, q = lane % 4;
	float r[4];
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
		float s = c[i];
		for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
		r[i] = s;
	}
	__syncwarp();
	for (int i = 0; i < 4; i++) c[i] = r[i];
}
// the hardware cvt.rn.bf16x2.f32 pair split, as f2bf (round to nearest even)
void split_bf16x2(float a, float b, u32 &hi, u32 &lo) {
	bf16 ha = f2bf(a), hb = f2bf(b);
	hi = (u32)ha | ((u32)hb << 16);
	lo = (u32)f2bf(a - bf2f(ha)) | ((u32)f2bf(b - bf2f(hb)) << 16);
}
#include "gemv_part.cu"
// launch runs f as grid blocks of 32·warps emulated threads.
template <class F> void launch(int grid, F f, int warps = GEMV_WARPS) {
	for (int b = 0; b < grid; b++) {
		bar = std::make_unique<std::barrier<>>(32 * warps);
		wbar.clear();
		for (int i = 0; i < warps; i++) wbar.push_back(std::make_unique<std::barrier<>>(32));
		vector<thread> th;
		for (int t = 0; t < 32 * warps; t++)
			th.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; f(); });
		for (auto &t : th) t.join();
	}
}
// groupCheck: m_gemv_bf16_group with 1..4 products equals separate
// m_gemv_bf16 launches bit for bit and writes nothing outside its outputs.
int groupCheck(mt19937 &rng) {
	normal_distribution<float> nd;
	int bad = 0;
	for (int n : {1, 3, 8}) {
		for (int used = 1; used <= 4; used++) {
			const int K = 264, Os[4] = {21, 37, 5, 16};
			vector<float> x(n * K);
			for (auto &v : x) v = nd(rng);
			vector<vector<bf16>> w(4);
			vector<vector<float>> sep(4), grp(4);
			int O[4], s[4], total = 0;
			for (int i = 0; i < 4; i++) {
				O[i] = i < used ? Os[i] : 0;
				w[i].resize(max(O[i], 1) * K);
				for (auto &v : w[i]) v = f2bf(nd(rng) * 0.05f);
				sep[i].assign(8 * Os[i] + 8, NAN);
				grp[i].assign(8 * Os[i] + 8, NAN);
			}
			for (int i = 0; i < 4; i++) {
				s[i] = total;
				total += (O[i] + 15) / 16;
			}
			for (int i = used; i < 4; i++) s[i] = total;
			for (int i = 0; i < used; i++)
				launch((O[i] + 15) / 16, [&, i] { m_gemv_bf16(sep[i].data(), x.data(), w[i].data(), n, O[i], K); });
			launch(total, [&] {
				m_gemv_bf16_group(x.data(), n, K, grp[0].data(), w[0].data(), O[0], grp[1].data(), w[1].data(), O[1], s[1],
						  grp[2].data(), w[2].data(), O[2], s[2], grp[3].data(), w[3].data(), O[3], s[3]);
			});
			for (int i = 0; i < 4; i++)
				if (memcmp(sep[i].data(), grp[i].data(), sep[i].size() * sizeof(float)) != 0) {
					// NaN sentinels compare equal bytewise, so any difference is real
					if (bad++ < 5) printf("group n=%d used=%d product %d differs from its own launch\n", n, used, i);
				}
		}
	}
	printf("gemv group: %d mismatches against separate launches\n", bad);
	return bad;
}
int main() {
	mt19937 rng(3);
	normal_distribution<float> nd;
	int bad = 0;
	double worstSplit = 0, worstExact = 0;
	for (int n = 1; n <= 8; n++) {
		for (int K : {8, 40, 264, 2056}) {
			for (int O : {21, 37}) {
				vector<float> x(n * K);
				vector<bf16> w(O * K);
				for (auto &v : x) v = nd(rng);
				for (auto &v : w) v = f2bf(nd(rng) * 0.05f);
				for (int wide = 0; wide < 2; wide++) {
				vector<float> out(8 * O + 8, NAN);
				if (wide)
					launch((O + 15) / 16, [&] { m_gemv_bf16_wide(out.data(), x.data(), w.data(), n, O, K); }, GEMV_WIDE_WARPS);
				else
					launch((O + 15) / 16, [&] { m_gemv_bf16(out.data(), x.data(), w.data(), n, O, K); });
				for (int i = 0; i < n; i++) for (int o = 0; o < O; o++) {
					double ref = 0, exact = 0, mag = 0;
					for (int k = 0; k < K; k++) {
						double wf = bf2f(w[o * K + k]);
						float xv = x[i * K + k];
						bf16 hi = f2bf(xv), lo = f2bf(xv - bf2f(hi));
						ref += ((double)bf2f(hi) + bf2f(lo)) * wf;
						exact += xv * wf;
						mag += fabs(xv * wf);
					}
					double got = out[i * O + o];
					worstSplit = max(worstSplit, fabs(got - ref) / mag);
					worstExact = max(worstExact, fabs(got - exact) / mag);
					if (!(fabs(got - ref) <= 1e-6 * mag) || !(fabs(got - exact) <= 2e-5 * mag)) {
						if (bad++ < 5) printf("n=%d K=%d O=%d [%d,%d] got %g want %g (exact %g)\n", n, K, O, i, o, got, ref, exact);
					}
				}
				for (size_t j = n * O; j < out.size(); j++) if (!std::isnan(out[j])) { if (bad++ < 5) printf("n=%d K=%d wrote past the output at %zu\n", n, K, j); }
				}
			}
		}
	}
	printf("gemv: %d mismatches (worst vs split reference %.2e, vs exact %.2e, of sum |x.w|)\n", bad, worstSplit, worstExact);
	bad += groupCheck(rng);
	return bad != 0;
}
