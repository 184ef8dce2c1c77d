// Token picks over float32 logits rows [rows, V], one block of SMP_THREADS
// per row: the greedy choice, or a draw from the tempered probabilities
// filtered by top-k, top-p and min-p, exactly as engine/sample's
// Sampler.SampleAt draws for a sequence with no penalty, constraint or ban
// (model.Draw): the same candidate set and the same scan, in vocabulary
// order, for the token at which the running mass passes u times the set's
// mass. What differs from the host is rounding: expf against the host's
// vectorised exp (a few ulps), and the order float64 sums are taken in.
// Every reduction here has a fixed order, so a pick is deterministic.
//
// The candidate set of a draw is a prefix of the vocabulary sorted best
// first (ties to the lower id), kept implicit as (v, last): the tokens
// whose probability p is above v, and those equal to v with an id up to
// last. Top-k and top-p find their prefix by radix selection over the bits
// of p (positive floats order as their bit patterns): three passes with
// 11-, 11- and 10-bit histograms find the value at which the count (top-k)
// or the mass (top-p, in 2^-40 fixed point so the sums are exact and
// order-free) from the top crosses the bound, and one ordered pass over
// the tokens equal to it finds last. The set is the shortest of the
// filters' prefixes.

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define PICK_BINS 2048
#define PICK_FIX 1099511627776.0 // 2^40: the histograms' fixed point

// PickParams is one row's settings (backend/cuda putPicks writes them).
struct PickParams {
	float inv_t;  // 1 / temperature as float32; 0: greedy
	int top_k;    // <= 0 or >= V: off
	float min_p;  // <= 0: off
	int pad;
	double top_p; // >= 1: off
	double u;     // the sequence's uniform value in [0, 1)
};

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// block_sum_d is the sum of v over the block, to every thread, in a fixed
// order. scratch: SMP_WARPS doubles.
__device__ __forceinline__ double block_sum_d(double v, double *scratch) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	v = warp_sum_d(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	v = lane < SMP_WARPS ? scratch[lane] : 0.0;
	return warp_sum_d(v);
}

// block_scan returns the sum of v over the threads before this one and
// sets *total to the sum over all, in a fixed order (double or u64).
// scratch: SMP_WARPS values.
template <typename T> __device__ __forceinline__ T block_scan(T v, T *scratch, T *total) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	T x = v; // inclusive within the warp
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const T y = __shfl_up_sync(0xffffffffu, x, o);
		if (lane >= o) x += y;
	}
	T ex = __shfl_up_sync(0xffffffffu, x, 1);
	if (lane == 0) ex = 0;
	__syncthreads();
	if (lane == 31) scratch[w] = x;
	__syncthreads();
	if (w == 0) {
		T s = scratch[lane]; // SMP_WARPS == 32
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const T y = __shfl_up_sync(0xffffffffu, s, o);
			if (lane >= o) s += y;
		}
		scratch[lane] = s; // inclusive over warps
	}
	__syncthreads();
	const T before = (w > 0 ? scratch[w - 1] : (T)0) + ex;
	*total = scratch[SMP_WARPS - 1];
	__syncthreads();
	return before;
}

// PickRow is one row's tempered probabilities, computed as the host's
// sampler computes them: p = exp(x * inv - max), the product and the
// difference rounded separately (no fused multiply-add), NaN read as 0.
struct PickRow {
	const float *x;
	float inv, mxs;
	int V;
	__device__ __forceinline__ float p(int i) const {
		const float xi = x[i];
		const float s = inv == 1.0f ? xi : __fmul_rn(xi, inv);
		const float e = expf(__fsub_rn(s, mxs));
		return e == e ? e : 0.0f;
	}
};

// PickSet is a best-first prefix: p > v, or p == v and id <= last.
struct PickSet {
	float v;
	int last;
	__device__ __forceinline__ bool in(int i, float p) const { return p > v || (p == v && i <= last); }
	// shorter reports whether s is a shorter prefix than this one.
	__device__ __forceinline__ bool shorter(PickSet s) const { return s.v > v || (s.v == v && s.last < last); }
};

// pick_find walks the row in vocabulary order in SMP_THREADS contiguous
// chunks and returns the first index at which the running sum of wt(i)
// exceeds scale * total + offset (total: wt's sum over the row, also
// returned in *total), or the last index with weight where rounding puts
// the target past the end; -1 when no index has weight. Each warp sums
// whole chunks with coalesced reads; the chunk holding the target is
// scanned by one thread.
template <typename W>
__device__ int pick_find(const W &wt, int V, double scale, double offset, double *chunk, double *scratch, int *shared_i,
			 double *total) {
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int per = (V + SMP_THREADS - 1) / SMP_THREADS;
	int lastw = -1;
	for (int c = wid; c < SMP_THREADS; c += SMP_WARPS) {
		const int lo = min(V, c * per), hi = min(V, lo + per);
		double s = 0.0;
		for (int i = lo + lane; i < hi; i += 32) {
			const double w = wt(i);
			if (w > 0.0) {
				s += w;
				lastw = max(lastw, i);
			}
		}
		s = warp_sum_d(s);
		if (lane == 0) chunk[c] = s;
	}
	if (tid == 0) shared_i[0] = -1, shared_i[1] = -1;
	__syncthreads();
	atomicMax(&shared_i[1], lastw);
	const double mine = chunk[tid];
	double tot;
	const double before = block_scan(mine, scratch, &tot);
	const double target = scale * tot + offset;
	if (mine > 0.0 && before <= target && target < before + mine) {
		const int lo = min(V, tid * per), hi = min(V, lo + per);
		double acc = before;
		int found = -1;
		for (int i = lo; i < hi; i++) {
			const double w = wt(i);
			if (w > 0.0) {
				found = i;
				acc += w;
				if (acc > target) break;
			}
		}
		shared_i[0] = found;
	}
	__syncthreads();
	const int r = shared_i[0] >= 0 ? shared_i[0] : shared_i[1];
	*total = tot;
	__syncthreads();
	return r;
}

// pick_select finds the value at which a best-first walk of the row's
// probabilities crosses a bound: by count (mass false: the value of the
// need-th largest, need in [1, V]) or by mass in fixed point (the value at
// which the mass from the top first reaches need). It returns the value's
// bits and sets *rest to what is left of need at the value (count: the
// rank among the ties, 1-based; mass: need less the mass above the value)
// and *found to whether the bound was reached.
__device__ u32 pick_select(const PickRow &row, bool mass, u64 need, u64 *hist, u64 *rest, bool *found, u32 *sbits,
			   u64 *sneed) {
	const int tid = threadIdx.x;
	u32 prefix = 0, pmask = 0;
	for (int lv = 0; lv < 3; lv++) {
		const int sh = lv == 0 ? 21 : lv == 1 ? 10 : 0, nb = lv == 2 ? 1024 : 2048;
		for (int b = tid; b < PICK_BINS; b += SMP_THREADS) hist[b] = 0;
		__syncthreads();
		for (int i = tid; i < row.V; i += SMP_THREADS) {
			const float p = row.p(i);
			const u32 bits = __float_as_uint(p);
			if ((bits & pmask) != prefix || p <= 0.0f) continue;
			const u64 add = mass ? (u64)(p * PICK_FIX) : 1ull;
			if (add) atomicAdd(&hist[(bits >> sh) & (nb - 1)], add);
		}
		__syncthreads();
		// the crossing bin from the top: thread t holds bins
		// nb-1-2t and nb-2-2t (nb <= 2048)
		const int b0 = nb - 1 - 2 * tid, b1 = b0 - 1;
		const u64 h0 = b0 >= 0 ? hist[b0] : 0, h1 = b1 >= 0 ? hist[b1] : 0;
		u64 tot;
		const u64 ab = block_scan(h0 + h1, hist + PICK_BINS, &tot);
		if (tid == 0) *sbits = 0xffffffffu;
		__syncthreads();
		if (b0 >= 0 && ab < need && need <= ab + h0 + h1) {
			if (need <= ab + h0) {
				*sbits = (u32)b0, *sneed = need - ab;
			} else {
				*sbits = (u32)b1, *sneed = need - ab - h0;
			}
		}
		__syncthreads();
		if (*sbits == 0xffffffffu) {
			*found = false;
			return 0;
		}
		prefix |= *sbits << sh;
		pmask |= (u32)(nb - 1) << sh;
		need = *sneed;
		__syncthreads();
	}
	*found = true;
	*rest = need;
	return prefix;
}

// m_pick: out[r] = (token, log-softmax of the raw row at it) for each row
// r of logits [rows, V] under params[r] (params 0: every row greedy).
// Greedy: the first index of the largest value, NaNs skipped; -1 (and
// logprob 0) when no value is above -Inf. The log-sum-exp is summed in
// double over float32 exponentials, as vecmath.SumExpShifted takes it.
// grid rows, block SMP_THREADS.
extern "C" __global__ void __launch_bounds__(SMP_THREADS) m_pick(float *out, const float *logits, int V,
								  const PickParams *params) {
	__shared__ float fscr[32];
	__shared__ double dscr[SMP_WARPS];
	__shared__ double chunk[SMP_THREADS];
	__shared__ u64 hist[PICK_BINS + SMP_WARPS]; // bins, then block_scan_d's scratch
	__shared__ int si[2];
	__shared__ int pick;
	__shared__ u32 sbits;
	__shared__ u64 sneed;
	const int r = blockIdx.x, tid = threadIdx.x;
	const float *x = logits + (long long)r * V;
	float mx = -KT_INF;
	int am = 0x7fffffff;
	for (int i = tid; i < V; i += SMP_THREADS) {
		const float v = x[i];
		if (v > mx) mx = v, am = i; // false for NaN; i rises, so the first maximum
	}
	const float gmx = block_max(mx, fscr);
	if (tid == 0) pick = 0x7fffffff;
	__syncthreads();
	if (mx == gmx && gmx > -KT_INF) atomicMin(&pick, am);
	double se = 0.0;
	for (int i = tid; i < V; i += SMP_THREADS) {
		const float v = x[i];
		if (v == v) se += (double)expf(v - gmx);
	}
	se = block_sum_d(se, dscr);
	__syncthreads();
	int tok = pick == 0x7fffffff ? -1 : pick;
	PickParams P = {};
	if (params) P = params[r];
	if (tok >= 0 && P.inv_t > 0.0f && P.top_k != 1) {
		PickRow row = {x, P.inv_t, P.inv_t == 1.0f ? gmx : __fmul_rn(gmx, P.inv_t), V};
		PickSet set = {0.0f, -1}; // every token with mass
		const bool useK = P.top_k > 0 && P.top_k < V, useP = P.top_p < 1.0, useM = P.min_p > 0.0f;
		double kmass = 0.0;
		if (useK) {
			u64 rank;
			bool ok;
			const u32 vb = pick_select(row, false, (u64)P.top_k, hist, &rank, &ok, &sbits, &sneed);
			if (ok) {
				const float v = __uint_as_float(vb);
				// last: the rank-th token equal to v in id order
				auto eq = [&](int i) { return row.p(i) == v ? 1.0 : 0.0; };
				double n;
				const int last = pick_find(eq, V, 0.0, (double)rank - 0.5, chunk, dscr, si, &n);
				set = {v, last};
				if (useP) {
					const PickSet ks = set;
					auto in = [&](int i) {
						const float p = row.p(i);
						return ks.in(i, p) ? (double)p : 0.0;
					};
					pick_find(in, V, 0.0, -1.0, chunk, dscr, si, &kmass);
				}
			} // else fewer than top_k tokens have mass: no cut
		}
		if (useP) {
			double tot = kmass;
			if (!(useK && tot > 0.0)) {
				tot = 0.0;
				for (int i = tid; i < V; i += SMP_THREADS) tot += (double)row.p(i);
				tot = block_sum_d(tot, dscr);
			}
			const double target = P.top_p * tot;
			u64 rest;
			bool ok;
			// the fixed-point target, rounded up: the crossing is where
			// the mass from the top first reaches it
			const u64 need = (u64)ceil(target * PICK_FIX);
			const u32 vb = pick_select(row, true, need > 0 ? need : 1, hist, &rest, &ok, &sbits, &sneed);
			if (ok) {
				const float v = __uint_as_float(vb);
				const u64 pv = (u64)(v * PICK_FIX);
				// the ties taken: the fewest whose mass reaches rest
				const u64 j = pv > 0 ? (rest + pv - 1) / pv : 1;
				auto eq = [&](int i) { return row.p(i) == v ? 1.0 : 0.0; };
				double n;
				const int last = pick_find(eq, V, 0.0, (double)(j > 0 ? j : 1) - 0.5, chunk, dscr, si, &n);
				const PickSet ps = {v, last};
				if (!useK || set.shorter(ps)) set = ps;
			}
		}
		if (useM) {
			const PickSet ms = {P.min_p, 0x7fffffff}; // p >= min_p · max, the max being 1
			if (set.shorter(ms)) set = ms;
		}
		const PickSet fs = set;
		auto in = [&](int i) {
			const float p = row.p(i);
			return fs.in(i, p) ? (double)p : 0.0;
		};
		double mass;
		const int t = pick_find(in, V, P.u, 0.0, chunk, dscr, si, &mass);
		if (t >= 0) tok = t;
	}
	if (tid == 0) {
		out[2 * r] = (float)tok;
		out[2 * r + 1] = tok < 0 ? 0.0f : (float)((double)x[tok] - (double)gmx - log(se));
	}
}
