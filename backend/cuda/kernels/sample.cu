// Token picks over float32 logits rows [rows, V]: the greedy choice, or a
// draw from the tempered probabilities filtered by top-k, top-p and min-p,
// exactly as engine/sample's Sampler.SampleAt draws for a sequence with no
// penalty, constraint or ban (model.Draw): the same candidate set and the
// same scan, in vocabulary order, for the token at which the running mass
// passes u times the set's mass. What differs from the host is rounding:
// expf against the host's vectorised exp (a few ulps), and the order
// float64 sums are taken in. Every reduction here has a fixed order, so a
// pick is deterministic.
//
// A row is worked on by a cluster of PICK_C blocks (sm_90: 8 SMs, the
// blocks exchanging partial results through distributed shared memory;
// before sm_90 one block, the launch's other blocks idle), each block over
// a contiguous slice of the row: a row's passes run at the memory
// parallelism of PICK_C SMs instead of one.
//
// The candidate set of a draw is a prefix of the vocabulary sorted best
// first (ties to the lower id), kept implicit as (v, last): the tokens
// whose probability p is above v, and those equal to v with an id up to
// last. Top-k and top-p find their prefix by radix selection over
// order-preserving keys of the tempered logits s (p = e^(s - max) rises
// with s): three passes with 11-, 11- and 10-bit histograms find the value
// at which the count (top-k) or the mass (top-p, in 2^-40 fixed point so
// the sums are exact and order-free) from the top crosses the bound; one
// exact pass in a narrow window around it counts what lies above its p, and
// an ordered search over the tokens equal to it finds last. The set is the
// shortest of the filters' prefixes. Exponentials are taken only where a
// window or the candidate set needs them. A top-k of at most PICK_SMALL
// tokens, or a top-p whose candidates (the tokens above the host's
// prefilter bound) are that few, is gathered once and the rest (top-p,
// min-p, the draw) is taken on that list in shared memory (pick_small).

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define PICK_BINS 2048
#define PICK_FIX 1099511627776.0 // 2^40: the histograms' fixed point
#define PICK_GRID 8              // blocks launched per row (Device.Pick)
#define PICK_SMALL 1024          // the largest top-k finished on a gathered list (pick_small)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PICK_CLUSTERS 1
#define PICK_C 8 // blocks per row working together in m_pick (a thread-block cluster)
#define PICK_CLUSTER __cluster_dims__(PICK_C, 1, 1)
#else
#define PICK_CLUSTERS 0
#define PICK_C 1
#define PICK_CLUSTER
#endif

// PickParams is one row's settings (backend/cuda putPicks writes them).
struct PickParams {
	float inv_t;  // 1 / temperature as float32; 0: greedy
	int top_k;    // <= 0 or >= V: off
	float min_p;  // <= 0: off
	int pad;
	double top_p; // >= 1: off
	double u;     // the sequence's uniform value in [0, 1)
};

// cl_rank is this block's rank in its row's cluster.
template <int C> __device__ __forceinline__ u32 cl_rank() {
#if PICK_CLUSTERS
	if (C > 1) {
		u32 r;
		asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
		return r;
	}
#endif
	return 0;
}

// cl_sync is a barrier over every thread of the cluster, after which each
// block's shared memory writes are visible to the others.
template <int C> __device__ __forceinline__ void cl_sync() {
#if PICK_CLUSTERS
	if (C > 1) {
		asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
		return;
	}
#endif
	__syncthreads();
}

#if PICK_CLUSTERS
// cl_addr is the cluster shared-memory address of p (a shared variable)
// in block rank's copy.
__device__ __forceinline__ u32 cl_addr(const void *p, u32 rank) {
	u32 a;
	asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}" : "=r"(a) : "l"(p));
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(a), "r"(rank));
	return a;
}
#endif

// cl_load reads the shared variable *p (4 or 8 bytes) of block rank in
// the cluster (C blocks; 1: this block's own).
template <int C, typename T> __device__ __forceinline__ T cl_load(const T *p, u32 rank) {
	static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cl_load reads 4 or 8 bytes");
#if PICK_CLUSTERS
	if (C > 1) {
		if (sizeof(T) == 8) {
			union { u64 u; T t; } v;
			asm volatile("ld.shared::cluster.b64 %0, [%1];" : "=l"(v.u) : "r"(cl_addr(p, rank)) : "memory");
			return v.t;
		}
		union { u32 u; T t; } v;
		asm volatile("ld.shared::cluster.b32 %0, [%1];" : "=r"(v.u) : "r"(cl_addr(p, rank)) : "memory");
		return v.t;
	}
#endif
	return *p;
}

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

// PickRow is one row's tempered logits s = x * inv (x itself when inv is
// 1; NaN: none) and probabilities p = exp(s - mxs), computed as the host's
// sampler computes them: the product and the difference rounded
// separately (no fused multiply-add). [lo, hi) is this block's slice.
struct PickRow {
	const float *x;
	float inv, mxs;
	int V, lo, hi;
	__device__ __forceinline__ float s(int i) const {
		const float xi = x[i];
		return inv == 1.0f ? xi : __fmul_rn(xi, inv);
	}
	__device__ __forceinline__ float p(float s) const {
		const float e = expf(__fsub_rn(s, mxs));
		return e == e ? e : 0.0f;
	}
};

// pick_key orders tempered logits as unsigned integers (a larger s, a
// larger key); pick_unkey inverts it.
__device__ __forceinline__ u32 pick_key(float s) {
	const u32 b = __float_as_uint(s);
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float pick_unkey(u32 k) {
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// pick_margin is a width of tempered logit around s beyond which p is
// surely different from p(s) (p moves by a factor e^1e-5, hundreds of
// ulps, well past the rounding of the product, the difference and expf):
// windows of exact comparison are that wide, and everything outside them
// is decided from s alone, without an exponential.
__device__ __forceinline__ float pick_margin(float s, float mxs) { return 1e-5f * (1.0f + fabsf(s) + fabsf(mxs)); }

// PickSet is a best-first prefix: p > v, or p == v and id <= last; no
// token with s below slo is in it.
struct PickSet {
	float v;
	int last;
	float slo;
	__device__ __forceinline__ bool in(int i, float p) const { return p > v || (p == v && i <= last); }
	// shorter reports whether t is a shorter prefix than this one.
	__device__ __forceinline__ bool shorter(const PickSet &t) const { return t.v > v || (t.v == v && t.last < last); }
};

// PickScratch is a block's shared scratch; the x* fields are what the
// cluster's blocks read from one another.
struct PickScratch {
	double chunk[SMP_THREADS]; // pick_find's per-chunk sums
	u64 hist[PICK_BINS];       // pick_select's bins (u32 counts in the first half)
	u64 hscan[SMP_WARPS];      // block_scan's scratch over the bins
	double dscr[SMP_WARPS];
	float fscr[32];
	double dval[2];
	int ival[4];
	u32 sbits;
	u64 sneed;
	double xd[2]; // exchanged: sums
	u32 xu[2];    // exchanged: keys, indices
	double bd;    // broadcast within the block
	u32 bu;
	// pick_small's lists: the gathered set (then the cluster's, in id
	// order) and this block's in id order (exchanged)
	int gi[PICK_SMALL];
	float gp[PICK_SMALL];
	int li[PICK_SMALL];
	float lp[PICK_SMALL];
	int gn;
};

// cl_sum is the sum of v (the same in every thread of the block) over the
// cluster's blocks, in rank order: the same value in every block.
template <int C> __device__ double cl_sum(double v, PickScratch &sh) {
	if (threadIdx.x == 0) sh.xd[0] = v;
	cl_sync<C>();
	if (threadIdx.x == 0) {
		double t = 0.0;
		for (u32 q = 0; q < C; q++) t += cl_load<C>(&sh.xd[0], q);
		sh.bd = t;
	}
	cl_sync<C>(); // every block has read the others' xd before they change it
	return sh.bd;
}

// cl_sum_d is block_sum_d over the cluster.
template <int C> __device__ double cl_sum_d(double v, PickScratch &sh) { return cl_sum<C>(block_sum_d(v, sh.dscr), sh); }

// cl_min_u is the smallest of v (the same in every thread of the block)
// over the cluster's blocks.
template <int C> __device__ u32 cl_min_u(u32 v, PickScratch &sh) {
	if (threadIdx.x == 0) sh.xu[0] = v;
	cl_sync<C>();
	if (threadIdx.x == 0) {
		u32 m = 0xffffffffu;
		for (u32 q = 0; q < C; q++) m = min(m, cl_load<C>(&sh.xu[0], q));
		sh.bu = m;
	}
	cl_sync<C>();
	return sh.bu;
}

// pick_find walks the row in vocabulary order, each block over its slice
// in SMP_THREADS contiguous chunks, and returns the first index at which
// the running sum of wt(i) exceeds scale * total + offset (total: wt's sum
// over the row, returned in *total), or the last index with weight where
// rounding puts the target past the end; -1 when no index has weight. Each
// warp sums whole chunks with coalesced reads; the blocks' totals give each
// its start; the chunk holding the target is walked by one warp, 32
// indices at a time. Every block returns the same index.
template <int C, typename W>
__device__ int pick_find(const W &wt, const PickRow &row, double scale, double offset, PickScratch &sh, double *total) {
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int n = row.hi - row.lo, per = (n + SMP_THREADS - 1) / SMP_THREADS;
	int lastw = -1;
	for (int c = wid; c < SMP_THREADS; c += SMP_WARPS) {
		const int lo = row.lo + min(n, c * per), hi = row.lo + min(n, c * per + per);
		double s = 0.0;
#pragma unroll 4
		for (int i = lo + lane; i < hi; i += 32) {
			const double w = wt(i);
			if (w > 0.0) {
				s += w;
				lastw = i;
			}
		}
		s = warp_sum_d(s);
		if (lane == 0) sh.chunk[c] = s;
	}
	if (tid == 0) sh.ival[0] = -1, sh.ival[1] = -1, sh.ival[2] = -1;
	__syncthreads();
	atomicMax(&sh.ival[1], lastw);
	const double mine = sh.chunk[tid];
	double btot;
	const double before = block_scan(mine, sh.dscr, &btot);
	// the blocks before this one, and the row's total, in rank order
	if (tid == 0) sh.xd[1] = btot;
	cl_sync<C>();
	if (tid == 0) {
		const u32 me = cl_rank<C>();
		double off = 0.0, t = 0.0;
		for (u32 q = 0; q < C; q++) {
			const double bq = cl_load<C>(&sh.xd[1], q);
			if (q < me) off += bq;
			t += bq;
		}
		sh.dval[0] = off, sh.dval[1] = t;
	}
	cl_sync<C>();
	const double off = sh.dval[0], tot = sh.dval[1];
	__syncthreads(); // read before the owner below writes dval[0]
	const double target = scale * tot + offset;
	if (mine > 0.0 && off + before <= target && target < off + before + mine) {
		sh.ival[2] = tid;
		sh.dval[0] = off + before;
	}
	__syncthreads();
	if (wid == 0 && sh.ival[2] >= 0) {
		const int c = sh.ival[2];
		const int lo = row.lo + min(n, c * per), hi = row.lo + min(n, c * per + per);
		double acc = sh.dval[0];
		int found = -1;
		for (int base = lo; base < hi; base += 32) {
			const int i = base + lane;
			const double w = i < hi ? wt(i) : 0.0;
			double incl = w; // inclusive scan over the lanes
#pragma unroll
			for (int o = 1; o < 32; o <<= 1) {
				const double y = __shfl_up_sync(0xffffffffu, incl, o);
				if (lane >= o) incl += y;
			}
			const unsigned has = __ballot_sync(0xffffffffu, w > 0.0);
			const unsigned over = __ballot_sync(0xffffffffu, w > 0.0 && acc + incl > target);
			if (over) {
				found = base + __ffs(over) - 1;
				break;
			}
			if (has) found = base + 31 - __clz(has);
			acc += __shfl_sync(0xffffffffu, incl, 31);
		}
		if (lane == 0) sh.ival[0] = found;
	}
	__syncthreads();
	// the first block's find, else the last index with weight: keys with
	// the found index (+1, so -1 is 0) in the low bits of the minimum
	const u32 f = sh.ival[0] >= 0 ? (u32)sh.ival[0] : 0xffffffffu;
	const u32 first = cl_min_u<C>(f, sh);
	const u32 lastk = cl_min_u<C>(sh.ival[1] >= 0 ? 0x7fffffffu - (u32)sh.ival[1] : 0xffffffffu, sh);
	*total = tot;
	__syncthreads();
	if (first != 0xffffffffu) return (int)first;
	return lastk == 0xffffffffu ? -1 : (int)(0x7fffffffu - lastk);
}

// pick_select finds the tempered logit at which a best-first walk of the
// row crosses a bound, by radix selection over the keys of s (three
// passes, 11, 11 and 10 bits): by count (mass false: the need-th largest,
// NaNs aside) or by mass in 2^-40 fixed point (the value at which the mass
// from the top first reaches need). Tokens with s below floor are left out
// without an exponential. Each block bins its slice; every block then adds
// the cluster's bins and finds the same crossing. It returns whether the
// bound was reached and sets *sv to the value.
template <int C> __device__ bool pick_select(const PickRow &row, bool mass, u64 need, float floor, PickScratch &sh, float *sv) {
	const int tid = threadIdx.x;
	u32 *hc = (u32 *)sh.hist;
	u32 prefix = 0, pmask = 0;
	for (int lv = 0; lv < 3; lv++) {
		const int sh_ = lv == 0 ? 21 : lv == 1 ? 10 : 0, nb = lv == 2 ? 1024 : 2048;
		for (int b = tid; b < PICK_BINS; b += SMP_THREADS) sh.hist[b] = 0;
		__syncthreads();
#pragma unroll 4
		for (int i = row.lo + tid; i < row.hi; i += SMP_THREADS) {
			const float s = row.s(i);
			if (!(s >= floor)) continue; // NaN too
			const u32 k = pick_key(s);
			if ((k & pmask) != prefix) continue;
			const u32 bin = (k >> sh_) & (nb - 1);
			if (mass) {
				const u64 add = (u64)((double)row.p(s) * PICK_FIX);
				if (add) atomicAdd(&sh.hist[bin], add);
			} else {
				atomicAdd(&hc[bin], 1u);
			}
		}
		cl_sync<C>();
		// the crossing bin from the top: thread t holds bins nb-1-2t
		// and nb-2-2t (nb <= 2048), summed over the cluster's blocks
		const int b0 = nb - 1 - 2 * tid, b1 = b0 - 1;
		u64 h0 = 0, h1 = 0;
		for (u32 q = 0; q < C; q++) {
			if (b0 >= 0) h0 += mass ? cl_load<C>(&sh.hist[b0], q) : (u64)cl_load<C>(&hc[b0], q);
			if (b1 >= 0) h1 += mass ? cl_load<C>(&sh.hist[b1], q) : (u64)cl_load<C>(&hc[b1], q);
		}
		u64 all;
		const u64 ab = block_scan(h0 + h1, sh.hscan, &all);
		if (tid == 0) sh.sbits = 0xffffffffu;
		cl_sync<C>(); // the others have read this block's bins: they may change
		if (b0 >= 0 && ab < need && need <= ab + h0 + h1) {
			if (need <= ab + h0) {
				sh.sbits = (u32)b0, sh.sneed = need - ab;
			} else {
				sh.sbits = (u32)b1, sh.sneed = need - ab - h0;
			}
		}
		__syncthreads();
		if (sh.sbits == 0xffffffffu) return false;
		prefix |= sh.sbits << sh_;
		pmask |= (u32)(nb - 1) << sh_;
		need = sh.sneed;
		__syncthreads();
	}
	*sv = pick_unkey(prefix);
	return true;
}

// pick_cut turns a selected tempered logit sv into the prefix it ends:
// v = p(sv), the tokens above v counted (and their mass summed) exactly,
// and last, the id of the want-th token equal to v in id order, with want
// from bound(count above, mass above, count equal) — top-k's rank or
// top-p's fewest ties. Tokens below the margin window are skipped without
// an exponential, and above it only top-p takes one (for the mass).
template <int C, typename B>
__device__ PickSet pick_cut(const PickRow &row, float sv, float floor, bool wantMass, const B &bound, PickScratch &sh) {
	const float v = row.p(sv);
	if (!(v > 0.0f)) return PickSet{0.0f, -1, -KT_INF}; // the bound falls among tokens with no mass
	const float m = pick_margin(sv, row.mxs), slo = sv - m, shi = sv + m;
	double gt = 0.0, gmass = 0.0, eq = 0.0;
#pragma unroll 4
	for (int i = row.lo + threadIdx.x; i < row.hi; i += SMP_THREADS) {
		const float s = row.s(i);
		if (!(s >= slo && s >= floor)) continue;
		if (s > shi && !wantMass) {
			gt += 1.0;
			continue;
		}
		const float p = row.p(s);
		if (p > v) {
			gt += 1.0;
			gmass += (double)p;
		} else if (p == v) {
			eq += 1.0;
		}
	}
	gt = cl_sum_d<C>(gt, sh);
	eq = cl_sum_d<C>(eq, sh);
	if (wantMass) gmass = cl_sum_d<C>(gmass, sh);
	const double want = bound(gt, gmass, eq);
	auto tie = [&](int i) {
		const float s = row.s(i);
		return s >= slo && s <= shi && row.p(s) == v ? 1.0 : 0.0;
	};
	double n;
	const int last = pick_find<C>(tie, row, 0.0, want - 0.5, sh, &n);
	return PickSet{v, last, slo};
}

// pick_mass is the mass of set's tokens.
template <int C> __device__ double pick_mass(const PickRow &row, const PickSet &set, PickScratch &sh) {
	double t = 0.0;
#pragma unroll 4
	for (int i = row.lo + threadIdx.x; i < row.hi; i += SMP_THREADS) {
		const float s = row.s(i);
		if (!(s >= set.slo)) continue;
		const float p = row.p(s);
		if (set.in(i, p)) t += (double)p;
	}
	return cl_sum_d<C>(t, sh);
}

// pick_count is the number of tokens with mass whose s is at least floor.
template <int C> __device__ double pick_count(const PickRow &row, float floor, PickScratch &sh) {
	double n = 0.0;
#pragma unroll 4
	for (int i = row.lo + threadIdx.x; i < row.hi; i += SMP_THREADS) {
		const float s = row.s(i);
		if (s >= floor && row.p(s) > 0.0f) n += 1.0;
	}
	return cl_sum_d<C>(n, sh);
}

// pick_small finishes a draw on a short list: the tokens of set (a top-k
// of at most PICK_SMALL tokens) or those with s at least floor (at most
// PICK_SMALL, holding every token a nucleus of ptot's top_p can take). One
// pass gathers their ids and probabilities, every block puts the cluster's
// lists together in id order, and top-p, min-p and the draw are taken on
// that list in shared memory (ranks by counting, prefix sums in a fixed
// order) instead of passes over the row. The result is the pick the passes
// would make: the nucleus is the fewest best-first members (ties to the
// lower id) whose mass reaches top_p of ptot (0: of the list's mass), min-p
// keeps those at least min_p, and the token is the first member in id order
// at which the running mass passes u times what is left.
template <int C>
__device__ int pick_small(const PickRow &row, const PickSet &set, float floor, double ptot, const PickParams &P,
			  PickScratch &sh) {
	const int tid = threadIdx.x;
	if (tid == 0) sh.gn = 0;
	__syncthreads();
	for (int i = row.lo + tid; i < row.hi; i += SMP_THREADS) {
		const float s = row.s(i);
		if (!(s >= set.slo && s >= floor)) continue;
		const float p = row.p(s);
		if (!(p > 0.0f) || !set.in(i, p)) continue;
		const int k = atomicAdd(&sh.gn, 1);
		if (k < PICK_SMALL) sh.gi[k] = i, sh.gp[k] = p;
	}
	__syncthreads();
	const int nb = min(sh.gn, PICK_SMALL);
	// this block's list in id order (ids are distinct: rank by counting)
	if (tid < nb) {
		const int me = sh.gi[tid];
		int r = 0;
		for (int j = 0; j < nb; j++) r += sh.gi[j] < me;
		sh.li[r] = me, sh.lp[r] = sh.gp[tid];
	}
	if (tid == 0) sh.xu[1] = (u32)nb;
	cl_sync<C>();
	// the cluster's list: the blocks' lists in rank order (slices ascend)
	int n = 0;
	for (u32 q = 0; q < C; q++) {
		const int nq = (int)cl_load<C>(&sh.xu[1], q);
		const int t = tid - n; // this thread copies entry t of block q's list
		if (t >= 0 && t < nq && tid < PICK_SMALL) {
			sh.gi[tid] = cl_load<C>(&sh.li[t], q);
			sh.gp[tid] = cl_load<C>(&sh.lp[t], q);
		}
		n += nq;
	}
	cl_sync<C>(); // every block has copied the others' lists
	n = min(n, PICK_SMALL);
	// ranks best first (ties to the lower id, i.e. the earlier entry)
	int rank = 0x7fffffff;
	float pt = 0.0f;
	if (tid < n) {
		pt = sh.gp[tid];
		rank = 0;
		for (int j = 0; j < n; j++) {
			const float pj = sh.gp[j];
			rank += pj > pt || (pj == pt && j < tid);
		}
		sh.chunk[rank] = (double)pt;
	}
	__syncthreads();
	int L = n; // the kept prefix, in ranks
	if (P.top_p < 1.0) {
		const double v = tid < n ? sh.chunk[tid] : 0.0;
		double mass;
		const double before = block_scan(v, sh.dscr, &mass);
		const double target = P.top_p * (ptot > 0.0 ? ptot : mass);
		if (tid == 0) sh.ival[0] = n;
		__syncthreads();
		if (tid < n && before < target && before + v >= target) atomicMin(&sh.ival[0], tid + 1);
		__syncthreads();
		L = sh.ival[0];
	}
	if (P.min_p > 0.0f) {
		// members at least min_p (the top member's p is 1) are a prefix
		if (tid == 0) sh.ival[1] = 0;
		__syncthreads();
		if (tid < n && (float)sh.chunk[tid] >= P.min_p) atomicMax(&sh.ival[1], tid + 1);
		__syncthreads();
		L = min(L, sh.ival[1]);
	}
	__syncthreads();
	// the draw, over the kept members in id order
	const double w = rank < L ? (double)pt : 0.0;
	double mass;
	const double before = block_scan(w, sh.dscr, &mass);
	const double target = P.u * mass;
	if (tid == 0) sh.ival[2] = 0x7fffffff, sh.ival[3] = -1;
	__syncthreads();
	if (w > 0.0) {
		atomicMax(&sh.ival[3], tid);
		if (before <= target && target < before + w) atomicMin(&sh.ival[2], tid);
	}
	__syncthreads();
	const int t = sh.ival[2] != 0x7fffffff ? sh.ival[2] : sh.ival[3];
	const int tok = t >= 0 ? sh.gi[t] : -1;
	__syncthreads();
	return tok;
}

// pick_row is the pick of row r (its cluster of C blocks, or one block):
// out[r] = (token, log-softmax of the raw row at it) under params[r]
// (params 0: greedy). Greedy: the first index of the largest value, NaNs
// skipped; -1 (and logprob 0) when no value is above -Inf. The
// log-sum-exp is summed in double over float32 exponentials, as
// vecmath.SumExpShifted takes it.
template <int C> __device__ void pick_row(float *out, const float *logits, int V, const PickParams *params, int r) {
	__shared__ PickScratch sh;
	const int tid = threadIdx.x;
	const u32 rank = cl_rank<C>();
	const int slice = (V + C - 1) / C;
	const int lo = min(V, (int)rank * slice), hi = min(V, lo + slice);
	const float *x = logits + (long long)r * V;
	float mx = -KT_INF;
	int am = 0x7fffffff;
#pragma unroll 4
	for (int i = lo + tid; i < hi; i += SMP_THREADS) {
		const float v = x[i];
		if (v > mx) mx = v, am = i; // false for NaN; i rises, so the first maximum
	}
	// the row's maximum: the largest key over the cluster's blocks
	const float bmx = block_max(mx, sh.fscr);
	const float gmx = pick_unkey(0xffffffffu - cl_min_u<C>(0xffffffffu - pick_key(bmx), sh));
	if (tid == 0) sh.ival[3] = 0x7fffffff;
	__syncthreads();
	if (mx == gmx && gmx > -KT_INF) atomicMin(&sh.ival[3], am);
	__syncthreads();
	const u32 first = cl_min_u<C>((u32)sh.ival[3], sh);
	double se = 0.0;
#pragma unroll 4
	for (int i = lo + tid; i < hi; i += SMP_THREADS) {
		const float v = x[i];
		if (v == v) se += (double)expf(v - gmx);
	}
	se = cl_sum_d<C>(se, sh);
	int tok = first == 0x7fffffffu ? -1 : (int)first;
	PickParams P = {};
	if (params) P = params[r];
	if (tok >= 0 && P.inv_t > 0.0f && P.top_k != 1) {
		const PickRow row = {x, P.inv_t, P.inv_t == 1.0f ? gmx : __fmul_rn(gmx, P.inv_t), V, lo, hi};
		PickSet set = {0.0f, -1, -KT_INF}; // every token with mass
		const bool useK = P.top_k > 0 && P.top_k < V, useP = P.top_p < 1.0, useM = P.min_p > 0.0f;
		float sv;
		double tot = 0.0;
		if (useK && pick_select<C>(row, false, (u64)P.top_k, -KT_INF, sh, &sv)) {
			const double k = (double)P.top_k;
			set = pick_cut<C>(row, sv, -KT_INF, false, [&](double gt, double, double) { return k - gt; }, sh);
		}
		if (useK && set.v > 0.0f && P.top_k <= PICK_SMALL) {
			// the rest on the gathered set
			const int t = pick_small<C>(row, set, -KT_INF, 0.0, P, sh);
			if (t >= 0) tok = t;
			goto done;
		}
		if (useP) {
			// with top-k the nucleus is taken of its set's mass, and lies
			// within it
			const bool inK = set.v > 0.0f;
			tot = pick_mass<C>(row, set, sh);
			// tokens under (1 - top_p) * tot / V hold less than 1 - top_p
			// of the mass together, so the nucleus is among the others
			// (the host's prefilter): the histograms skip them
			float floor = set.slo;
			const double t0 = (1.0 - P.top_p) * tot / V;
			if (!inK && t0 > 0.0) {
				const float lt = logf((float)t0);
				floor = __fadd_rn(row.mxs, lt) - pick_margin(lt, row.mxs);
			}
			if (!inK && pick_count<C>(row, floor, sh) <= PICK_SMALL) {
				// the candidates fit a list: the rest on it
				const int t = pick_small<C>(row, set, floor, tot, P, sh);
				if (t >= 0) tok = t;
				goto done;
			}
			const u64 need = (u64)fmax(1.0, ceil(P.top_p * tot * PICK_FIX));
			if (pick_select<C>(row, true, need, floor, sh, &sv)) {
				const double target = P.top_p * tot;
				const PickSet ps = pick_cut<C>(
				    row, sv, floor, true,
				    [&](double, double gmass, double eq) {
					    const double v = (double)row.p(sv);
					    return fmin(eq, fmax(1.0, ceil((target - gmass) / v)));
				    },
				    sh);
				if (!(set.v > 0.0f) || set.shorter(ps)) set = ps;
			}
		}
		if (useM) {
			const float lm = logf(P.min_p);
			const PickSet ms = {P.min_p, 0x7fffffff, __fadd_rn(row.mxs, lm) - pick_margin(lm, row.mxs)};
			if (set.shorter(ms)) set = ms; // p >= min_p · max, the max being 1
		}
		const PickSet fs = set;
		auto in = [&](int i) {
			const float s = row.s(i);
			if (!(s >= fs.slo)) return 0.0;
			const float p = row.p(s);
			return fs.in(i, p) ? (double)p : 0.0;
		};
		double mass;
		const int t = pick_find<C>(in, row, P.u, 0.0, sh, &mass);
		if (t >= 0) tok = t;
	}
done:
	if (rank == 0 && tid == 0) {
		out[2 * r] = (float)tok;
		out[2 * r + 1] = tok < 0 ? 0.0f : (float)((double)x[tok] - (double)gmx - log(se));
	}
}

// m_pick: the picks of rows [rows, V], one cluster of PICK_C blocks per
// row (before sm_90 one block, the row's other blocks idle). grid rows *
// PICK_GRID, block SMP_THREADS. For few rows: a row's passes over PICK_C
// SMs.
extern "C" __global__ void __launch_bounds__(SMP_THREADS) PICK_CLUSTER m_pick(float *out, const float *logits, int V,
									       const PickParams *params) {
	KT_GRID_DEP();
	if (PICK_C == 1 && blockIdx.x % PICK_GRID != 0) return;
	pick_row<PICK_C>(out, logits, V, params, blockIdx.x / PICK_GRID);
}

// m_pick_rows: the same picks, one block per row. grid rows, block
// SMP_THREADS. For many rows, which fill the GPU by themselves.
extern "C" __global__ void __launch_bounds__(SMP_THREADS) m_pick_rows(float *out, const float *logits, int V,
								       const PickParams *params) {
	KT_GRID_DEP();
	pick_row<1>(out, logits, V, params, blockIdx.x);
}
