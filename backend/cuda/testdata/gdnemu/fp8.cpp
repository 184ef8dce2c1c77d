// Host emulation of kernels/fp8.cu (no GPU needed): fp8_gemv, fp8_matmul_gen,
// fp8_gemm_mma (the mma.sync m16n8k16 tile computed from PTX's documented
// fragment layout, lanes exchanging registers through memory),
// fp8_dequant_split, fp8_moe_gateup and fp8_moe_down, one std::thread per CUDA thread. Every output is checked
// against a float64 reference over the dequantised weights: gemv and gen
// within 1e-6 of Σ|x·w|, the tensor-core kernel (activations in two bf16
// halves) within 2e-5; nothing outside the output may be written.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <memory>
#include <functional>
#include <array>
using namespace std;
struct dim3 { int x = 0, y = 0, z = 0; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::unique_ptr<std::barrier<>> bar;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static float fbuf[1024];
void __syncthreads() { bar->arrive_and_wait(); }
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int o) {
	fbuf[threadIdx.x] = v; __syncwarp();
	float r = fbuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)]; __syncwarp(); return r;
}
float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
typedef unsigned short bf16;
typedef unsigned int u32;
typedef unsigned long long u64;
static float fxs[4096], fhs[4096]; // the MoE kernels' dynamic shared memory
float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
float bf2f(bf16 x) { return __uint_as_float(((u32)x) << 16); }
bf16 f2bf(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}
static u32 mA[1024][4], mB[1024][2];
void mma_bf16_16816(float *d, const u32 *a, const u32 *b) {
	int tid = threadIdx.x, w = tid / 32, l = tid % 32, g = l / 4, t = l % 4;
	for (int i = 0; i < 4; i++) mA[tid][i] = a[i];
	mB[tid][0] = b[0], mB[tid][1] = b[1];
	__syncwarp();
	auto half = [](u32 v, int hi) { return bf2f((bf16)(hi ? v >> 16 : v & 0xffff)); };
	auto A = [&](int r, int c) { return half(mA[w * 32 + (r % 8) * 4 + (c % 8) / 2][r / 8 + 2 * (c / 8)], c % 2); };
	auto B = [&](int k, int n) { return half(mB[w * 32 + n * 4 + (k % 8) / 2][k / 8], k % 2); };
	float r[4];
	for (int i = 0; i < 4; i++) {
		int row = g + 8 * (i / 2), col = 2 * t + i % 2;
		float s = d[i];
		for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
		r[i] = s;
	}
	__syncwarp();
	for (int i = 0; i < 4; i++) d[i] = r[i];
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define KT_GRID_DEP()
#define __shared__ static
#define KT_EMU 1
#include "fp8_part.cu"

template <class F> void launch(dim3 grid, int nt, F f, bool warpExit = false) {
	gridDim = grid; blockDim = {nt, 1, 1};
	for (int y = 0; y < grid.y; y++) for (int x = 0; x < grid.x; x++) {
		bar = std::make_unique<std::barrier<>>(nt);
		wbar.clear();
		for (int w = 0; w < nt / 32; w++) wbar.push_back(std::make_unique<std::barrier<>>(32));
		std::vector<std::thread> th;
		for (int t = 0; t < nt; t++) th.emplace_back([&, t, x, y] { threadIdx.x = t; blockIdx = {x, y, 0}; f(); });
		for (auto &t : th) t.join();
	}
}
float dec(unsigned char c) { // reference decoder (OCP E4M3)
	int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
	float v = e == 0 ? ldexpf(m / 8.0f, -6) : ldexpf(1 + m / 8.0f, e - 7);
	return s ? -v : v;
}
int bad = 0;
void check(const char *what, int n, int O, int K, int bn, int bk, int kernel) {
	mt19937 rng(O * 7 + K);
	normal_distribution<float> nd;
	int sr = (O + bn - 1) / bn, sc = (K + bk - 1) / bk;
	vector<unsigned char> q(O * K + 16);
	for (auto &c : q) { c = rng() & 0xff; if ((c & 0x7f) == 0x7f) c = 0x3f; }
	vector<float> scale(sr * sc), x(n * K + 16);
	for (auto &s : scale) s = 0.001f + fabs(nd(rng)) * 0.01f;
	for (auto &v : x) v = nd(rng);
	vector<float> out(n * O + 64, NAN);
	if (kernel == 0) {
		launch({(O + 7) / 8, 1, 1}, 256, [&] {
			if (blockIdx.x * 8 + threadIdx.x / 32 >= O) return; // whole warps exit, as on the GPU
			fp8_gemv(out.data(), x.data(), q.data(), scale.data(), n, O, K, bn, bk, sc); });
	} else if (kernel == 1) {
		launch({(O + 7) / 8, n, 1}, 256, [&] {
			if (blockIdx.x * 8 + threadIdx.x / 32 >= O) return;
			fp8_matmul_gen(out.data(), x.data(), q.data(), scale.data(), O, K, bn, bk, sc); });
	} else {
		int vec = K % 16 == 0;
		launch({(O + 63) / 64, (n + 63) / 64, 1}, 128, [&] { fp8_gemm_mma(out.data(), x.data(), q.data(), scale.data(), n, O, K, bn, bk, sc, vec); });
	}
	double tol = kernel == 2 ? 2e-5 : 1e-6;
	for (int i = 0; i < n; i++) for (int o = 0; o < O; o++) {
		double ref = 0, mag = 0;
		for (int k = 0; k < K; k++) {
			double w = (double)(dec(q[o * K + k]) * scale[(o / bn) * sc + k / bk]);
			ref += x[i * K + k] * w; mag += fabs(x[i * K + k] * w);
		}
		if (!(fabs(out[i * O + o] - ref) <= tol * mag)) { if (bad++ < 8) printf("%s n=%d O=%d K=%d block [%d,%d] [%d,%d]: got %g want %g\n", what, n, O, K, bn, bk, i, o, out[i * O + o], ref); }
	}
	for (size_t j = n * O; j < out.size(); j++) if (!std::isnan(out[j])) { if (bad++ < 8) printf("%s wrote past the output at %zu\n", what, j); }
}
// checkMoE runs fp8_moe_gateup and fp8_moe_down for n tokens, k experts
// each (ids include skipped -1 and out-of-range entries) against float64
// over the dequantised experts: within 1e-5 of the magnitudes (the silu'd
// product) and 1e-6 of Σ|h·w| (down); skipped pairs keep their NaN.
void checkMoE(int n, int k, int E, int H, int I, int bn, int bk) {
	mt19937 rng(H * 31 + I + bn);
	normal_distribution<float> nd;
	auto mk = [&](int O, int K, vector<unsigned char> &q, vector<float> &s) {
		q.resize(O * K);
		for (auto &c : q) { c = rng() & 0xff; if ((c & 0x7f) == 0x7f) c = 0x3f; }
		s.resize(((O + bn - 1) / bn) * ((K + bk - 1) / bk));
		for (auto &v : s) v = 0.001f + fabs(nd(rng)) * 0.01f;
	};
	vector<vector<unsigned char>> q(3 * E);
	vector<vector<float>> s(3 * E);
	vector<u64> ptrs(3 * E), sptrs(3 * E);
	for (int e = 0; e < E; e++) for (int j = 0; j < 3; j++) {
		if (j < 2) mk(I, H, q[3 * e + j], s[3 * e + j]); else mk(H, I, q[3 * e + j], s[3 * e + j]);
		ptrs[3 * e + j] = (u64)q[3 * e + j].data(); sptrs[3 * e + j] = (u64)s[3 * e + j].data();
	}
	auto w = [&](int e, int j, int o, int c, int K) {
		int sc = (K + bk - 1) / bk;
		return (double)(dec(q[3 * e + j][o * K + c]) * s[3 * e + j][(o / bn) * sc + c / bk]);
	};
	vector<float> x(n * H);
	for (auto &v : x) v = nd(rng);
	vector<int> ids(n * k);
	for (int p = 0; p < n * k; p++) ids[p] = p == 1 ? -1 : p == 2 ? E : (int)(rng() % E);
	vector<float> hb(n * k * I + 8, NAN), yb(n * k * H + 8, NAN);
	launch({n * k, (I + 7) / 8, 1}, 256, [&] {
		if (ids[blockIdx.x] >= 0 && ids[blockIdx.x] < E && blockIdx.y * 8 + threadIdx.x / 32 >= I) { __syncthreads(); return; }
		fp8_moe_gateup(hb.data(), x.data(), ids.data(), ptrs.data(), sptrs.data(), H, I, k, E, bn, bk); });
	// down reads its own hbuf so a gate/up error does not hide a down error
	vector<float> hin(n * k * I);
	for (auto &v : hin) v = nd(rng);
	launch({n * k, (H + 7) / 8, 1}, 256, [&] {
		if (ids[blockIdx.x] >= 0 && ids[blockIdx.x] < E && blockIdx.y * 8 + threadIdx.x / 32 >= H) { __syncthreads(); return; }
		fp8_moe_down(yb.data(), hin.data(), ids.data(), ptrs.data(), sptrs.data(), H, I, E, bn, bk); });
	for (int p = 0; p < n * k; p++) {
		int e = ids[p], t = p / k;
		bool skip = e < 0 || e >= E;
		for (int i = 0; i < I; i++) {
			float got = hb[p * I + i];
			if (skip) { if (!std::isnan(got) && bad++ < 8) printf("moe gateup wrote skipped pair %d\n", p); continue; }
			double g = 0, u = 0, gm = 0, um = 0;
			for (int c = 0; c < H; c++) {
				g += x[t * H + c] * w(e, 0, i, c, H); gm += fabs(x[t * H + c] * w(e, 0, i, c, H));
				u += x[t * H + c] * w(e, 1, i, c, H); um += fabs(x[t * H + c] * w(e, 1, i, c, H));
			}
			double sg = g / (1 + exp(-g)), ref = sg * u;
			if (!(fabs(got - ref) <= 1e-5 * (gm * fabs(u) + um * fabs(sg)) + 1e-12) && bad++ < 8)
				printf("moe gateup H=%d I=%d block [%d,%d] pair %d i %d: got %g want %g\n", H, I, bn, bk, p, i, got, ref);
		}
		for (int c = 0; c < H; c++) {
			float got = yb[p * H + c];
			if (skip) { if (!std::isnan(got) && bad++ < 8) printf("moe down wrote skipped pair %d\n", p); continue; }
			double ref = 0, mag = 0;
			for (int i = 0; i < I; i++) { ref += hin[p * I + i] * w(e, 2, c, i, I); mag += fabs(hin[p * I + i] * w(e, 2, c, i, I)); }
			if (!(fabs(got - ref) <= 1e-6 * mag) && bad++ < 8)
				printf("moe down H=%d I=%d block [%d,%d] pair %d c %d: got %g want %g\n", H, I, bn, bk, p, c, got, ref);
		}
	}
	for (int j = n * k * I; j < n * k * I + 8; j++) if (!std::isnan(hb[j]) && bad++ < 8) printf("moe gateup wrote past the output\n");
	for (int j = n * k * H; j < n * k * H + 8; j++) if (!std::isnan(yb[j]) && bad++ < 8) printf("moe down wrote past the output\n");
}
int main() {
	// the decoder: every code, both ways
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f) continue;
		if (fp8_one((unsigned char)c) != dec(c)) { bad++; printf("code %#x: %g want %g\n", c, fp8_one(c), dec(c)); }
		float f[4]; fp8x4((u32)c << 16, f);
		if (f[2] != dec(c) || f[0] != 0 || f[1] != 0 || f[3] != 0) { bad++; printf("fp8x4 code %#x lane 2: %g\n", c, f[2]); }
	}
	for (int n : {1, 3, 8}) { check("gemv", n, 21, 160, 32, 32, 0); check("gemv", n, 9, 1024, 128, 128, 0); }
	check("gemv", 2, 17, 272, 5, 48, 0);
	check("gen", 3, 13, 37, 3, 5, 1);
	check("gen", 2, 9, 300, 128, 128, 1);
	check("mma", 70, 130, 300, 128, 128, 2); // K % 16 != 0: scalar loads, partial last k-block
	check("mma", 65, 64, 256, 32, 64, 2);
	check("mma", 9, 70, 160, 32, 32, 2);
	// fp8_dequant_split + a float64 "GEMM" of the stacked halves + fp8_add_quarters
	for (auto [n, O, K, bn, bk] : {std::array<int, 5>{5, 37, 45, 8, 16}, {3, 130, 300, 128, 128}}) {
		int sc = (K + bk - 1) / bk;
		mt19937 rng(O + K);
		normal_distribution<float> nd;
		vector<unsigned char> q(O * K);
		for (auto &c : q) { c = rng() & 0xff; if ((c & 0x7f) == 0x7f) c = 0; }
		vector<float> scale(((O + bn - 1) / bn) * sc), x(n * K);
		for (auto &v : scale) v = 0.001f + fabs(nd(rng)) * 0.01f;
		for (auto &v : x) v = nd(rng);
		vector<bf16> w2(2 * O * K + 8, 0xffff);
		launch({min((K + 255) / 256, 64), min(O, 65535), 1}, 256, [&] { fp8_dequant_split(w2.data(), q.data(), scale.data(), O, K, bn, bk, sc); });
		for (int i = 2 * O * K; i < 2 * O * K + 8; i++) if (w2[i] != 0xffff && bad++ < 8) printf("dequant_split wrote past the output\n");
		vector<float> d(2 * n * 2 * O);
		for (int r = 0; r < 2 * n; r++) for (int c = 0; c < 2 * O; c++) {
			double s = 0;
			for (int k = 0; k < K; k++) {
				float xv = x[(r % n) * K + k]; bf16 h = f2bf(xv);
				double a = r < n ? bf2f(h) : bf2f(f2bf(xv - bf2f(h)));
				s += a * bf2f(w2[c * K + k]);
			}
			d[r * 2 * O + c] = (float)s;
		}
		vector<float> out(n * O + 8, NAN);
		launch({(n * O + 255) / 256, 1, 1}, 256, [&] { fp8_add_quarters(out.data(), d.data(), n, O); });
		for (int r = 0; r < n; r++) for (int o = 0; o < O; o++) {
			double ref = 0, mag = 0;
			for (int k = 0; k < K; k++) {
				double w = (double)(dec(q[o * K + k]) * scale[(o / bn) * sc + k / bk]);
				ref += x[r * K + k] * w; mag += fabs(x[r * K + k] * w);
			}
			if (!(fabs(out[r * O + o] - ref) <= 2e-5 * mag) && bad++ < 8) printf("split gemm n=%d O=%d K=%d [%d,%d]: got %g want %g\n", n, O, K, r, o, out[r * O + o], ref);
		}
		for (int j = n * O; j < n * O + 8; j++) if (!std::isnan(out[j]) && bad++ < 8) printf("add_quarters wrote past the output\n");
	}
	checkMoE(3, 2, 4, 40, 24, 16, 16);
	checkMoE(2, 3, 5, 160, 80, 128, 128);
	checkMoE(2, 2, 3, 64, 32, 32, 32);
	checkMoE(2, 2, 3, 48, 40, 8, 16);
	printf("fp8: %d mismatches\n", bad);
	return bad != 0;
}
