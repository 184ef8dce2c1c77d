// Token selection over float32 logits [B, V]. One block (1024 threads) per
// row. Every thread owns a contiguous range of the vocabulary so that the
// sampled token is found by a deterministic prefix sum.

#define SMP_THREADS 1024

struct SampleParams {
	float temperature; // <= 0: greedy
	int top_k;         // <= 0: off
	float top_p;       // >= 1: off
	float min_p;       // <= 0: off
	float u;           // uniform draw in [0, 1)
};

// sample_f32: tokens[b] and logprobs[b] (log-softmax of the raw logits at
// the chosen token). Candidate set: tokens whose tempered probability p
// (relative to the max, so the top token has p = 1) is >= a threshold v,
// with v the largest value meeting top-k (at least k tokens at or above v),
// top-p (their mass >= top_p of the total) and min-p (v >= min_p). v is
// found by 40 bisection steps. The token is the first, in vocabulary
// order, where the running candidate mass exceeds u * candidate mass.
extern "C" __global__ void __launch_bounds__(SMP_THREADS) sample_f32(int *tokens, float *logprobs,
								   const float *logits, int V,
								   const SampleParams *params) {
	__shared__ float scratch[32];
	__shared__ float psum[SMP_THREADS];
	__shared__ int pick;
	const int b = blockIdx.x, tid = threadIdx.x;
	const float *row = logits + (long long)b * V;
	const SampleParams P = params[b];
	const int per = (V + SMP_THREADS - 1) / SMP_THREADS;
	const int lo = min(V, tid * per), hi = min(V, lo + per);
	// Max and log-sum-exp of the raw logits (for logprobs) and the argmax.
	float mx = -KT_INF;
	int am = 0x7fffffff;
	for (int i = lo; i < hi; i++) {
		float x = row[i];
		if (x > mx) { mx = x; am = i; }
	}
	float gmx = block_max(mx, scratch);
	// Argmax: lowest index holding the max.
	if (tid == 0) pick = 0x7fffffff;
	__syncthreads();
	if (mx == gmx) atomicMin(&pick, am);
	float se = 0.0f;
	for (int i = lo; i < hi; i++) se += expf(row[i] - gmx);
	se = block_sum(se, scratch);
	const float lse = gmx + logf(se);
	__syncthreads();
	int tok = pick;
	if (P.temperature > 0.0f) {
		const float invT = 1.0f / P.temperature;
		float tot = 0.0f;
		for (int i = lo; i < hi; i++) tot += expf((row[i] - gmx) * invT);
		tot = block_sum(tot, scratch);
		bool useK = P.top_k > 0 && P.top_k < V, useP = P.top_p < 1.0f;
		float v = P.min_p > 0.0f ? P.min_p : 0.0f;
		if (useK || useP) {
			// Bisect on the threshold: keep the largest v that still
			// satisfies every active constraint.
			float lo_v = v, hi_v = 1.0f;
			for (int it = 0; it < 40; it++) {
				float mid = 0.5f * (lo_v + hi_v);
				float cnt = 0.0f, mass = 0.0f;
				for (int i = lo; i < hi; i++) {
					float p = expf((row[i] - gmx) * invT);
					if (p >= mid) { cnt += 1.0f; mass += p; }
				}
				cnt = block_sum(cnt, scratch);
				mass = block_sum(mass, scratch);
				bool ok = (!useK || cnt >= (float)P.top_k) && (!useP || mass >= P.top_p * tot);
				if (ok) lo_v = mid; else hi_v = mid;
			}
			v = lo_v;
		}
		// Candidate mass per thread, then an exclusive prefix over threads.
		float mine = 0.0f;
		int lastc = -1;
		for (int i = lo; i < hi; i++) {
			float p = expf((row[i] - gmx) * invT);
			if (p >= v) { mine += p; lastc = i; }
		}
		psum[tid] = mine;
		__shared__ int lastall;
		if (tid == 0) { pick = -1; lastall = -1; }
		__syncthreads();
		atomicMax(&lastall, lastc);
		if (tid == 0) {
			float acc = 0.0f;
			for (int i = 0; i < SMP_THREADS; i++) { float x = psum[i]; psum[i] = acc; acc += x; }
			scratch[0] = acc; // total candidate mass
		}
		__syncthreads();
		float target = P.u * scratch[0];
		float acc = psum[tid];
		if (mine > 0.0f && target >= acc && target < acc + mine) {
			int found = lastc;
			for (int i = lo; i < hi; i++) {
				float p = expf((row[i] - gmx) * invT);
				if (p < v) continue;
				acc += p;
				if (acc > target) { found = i; break; }
			}
			atomicMax(&pick, found);
		}
		__syncthreads();
		if (pick < 0) pick = lastall; // rounding put the target past the end
		__syncthreads();
		tok = pick >= 0 ? pick : tok;
	}
	if (tid == 0) {
		tokens[b] = tok;
		logprobs[b] = row[tok] - lse;
	}
}

// m_greedy_pick: the greedy choice of each float32 logits row [rows, V]
// (Backend.GreedyPick): out[r] = (i, lp) with i the first index of the
// largest value — NaNs skipped, -1 when no value is above -Inf — and lp
// its log-softmax, -log Σ exp(x - max), the sum in double over float32
// exponentials as vecmath.SumExpShifted takes it on the host. Every thread
// owns a contiguous range, so the first maximum is the lowest index among
// the threads holding it. grid rows, block SMP_THREADS.
extern "C" __global__ void __launch_bounds__(SMP_THREADS) m_greedy_pick(float *out, const float *logits, int V) {
	__shared__ float scratch[32];
	__shared__ double dsum[32];
	__shared__ int pick;
	const int r = blockIdx.x, tid = threadIdx.x;
	const float *row = logits + (long long)r * V;
	const int per = (V + SMP_THREADS - 1) / SMP_THREADS;
	const int lo = min(V, tid * per), hi = min(V, lo + per);
	float mx = -KT_INF;
	int am = 0x7fffffff;
	for (int i = lo; i < hi; i++) {
		const float x = row[i];
		if (x > mx) { mx = x; am = i; } // false for NaN
	}
	const float gmx = block_max(mx, scratch);
	if (tid == 0) pick = 0x7fffffff;
	__syncthreads();
	if (mx == gmx && gmx > -KT_INF) atomicMin(&pick, am);
	double se = 0.0;
	for (int i = lo; i < hi; i++) {
		const float x = row[i];
		if (x == x) se += (double)expf(x - gmx);
	}
	// block sum in double: warps, then the first warp over their sums
	for (int o = 16; o > 0; o >>= 1) se += __shfl_xor_sync(0xffffffffu, se, o);
	if ((tid & 31) == 0) dsum[tid >> 5] = se;
	__syncthreads();
	if (tid < 32) {
		double v = dsum[tid];
		for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
		if (tid == 0) {
			const bool none = pick == 0x7fffffff;
			out[2 * r] = none ? -1.0f : (float)pick;
			out[2 * r + 1] = none ? 0.0f : (float)(-log(v));
		}
	}
}
