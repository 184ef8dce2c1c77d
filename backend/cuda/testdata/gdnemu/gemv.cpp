// Host emulation of kernels/model.cu's m_gemv_bf16 (a warp per output,
// 8 outputs per block): every output of n = 1..4 rows, with O not a
// multiple of 8 and K = 8·odd, must match a float64 reference within 1e-6
// relative, and no element outside the n×O output may be written.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <memory>
using namespace std;
struct dim3 { int x = 0, y = 0, z = 0; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
thread_local dim3 threadIdx, blockIdx;
static std::vector<std::unique_ptr<std::barrier<>>> wbar;
static float fbuf[1024];
void __syncwarp(unsigned = 0xffffffffu) { wbar[threadIdx.x / 32]->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int o) {
	fbuf[threadIdx.x] = v; __syncwarp();
	float r = fbuf[(threadIdx.x & ~31) | ((threadIdx.x & 31) ^ o)]; __syncwarp(); return r;
}
float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
typedef unsigned short bf16;
typedef unsigned int u32;
float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
void load8(const bf16 *p, float *f) {
	for (int i = 0; i < 8; i++) f[i] = __uint_as_float((u32)p[i] << 16);
}
#define __global__
typedef float act_t;
inline void st_act(act_t *p, long long i, float v) { p[i] = v; }
#include "gemv_part.cu"
int main() {
	mt19937 rng(3);
	normal_distribution<float> nd;
	int bad = 0;
	for (int n = 1; n <= 4; n++) {
		for (int K : {8, 264, 2048}) {
			const int O = 21;
			vector<float> x(n * K);
			vector<bf16> w(O * K);
			for (auto &v : x) v = nd(rng);
			for (auto &v : w) { float f = nd(rng) * 0.05f; u32 u; memcpy(&u, &f, 4); v = (bf16)(u >> 16); }
			vector<float> out(4 * O + 8, NAN);
			for (int b = 0; b < (O + 7) / 8; b++) {
				wbar.clear();
				for (int i = 0; i < 8; i++) wbar.push_back(std::make_unique<std::barrier<>>(32));
				vector<thread> th;
				// threads of warps whose output is past O return at once, as on the GPU
				for (int t = 0; t < 256; t++) {
					if (b * 8 + t / 32 >= O) continue;
					th.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; m_gemv_bf16(out.data(), x.data(), w.data(), n, O, K); });
				}
				for (auto &t : th) t.join();
			}
			for (int i = 0; i < n; i++) for (int o = 0; o < O; o++) {
				double ref = 0, mag = 0;
				for (int k = 0; k < K; k++) {
					double wf = __uint_as_float((u32)w[o * K + k] << 16);
					ref += x[i * K + k] * wf; mag += fabs(x[i * K + k] * wf);
				}
				if (!(fabs(out[i * O + o] - ref) <= 1e-6 * mag)) { if (bad++ < 5) printf("n=%d K=%d [%d,%d] got %g want %g\n", n, K, i, o, out[i * O + o], ref); }
			}
			for (size_t j = n * O; j < out.size(); j++) if (!std::isnan(out[j])) { if (bad++ < 5) printf("n=%d K=%d wrote past the output at %zu\n", n, K, j); }
		}
	}
	printf("gemv: %d mismatches\n", bad);
	return bad != 0;
}
