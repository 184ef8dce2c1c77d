// router.cu: the MoE router's top-k of the op set (Backend.RouterTopK): one
// thread per row, a warp per row, and a warp per row with the row in
// registers.

// router_pad_row: a row at or past *live (the first padding row of a
// decode step padded to its graph bucket; live null: none) routes nowhere:
// ids -1, weights 0, written by lanes lane, lane+step, ... It reports
// whether the row was one.
__device__ __forceinline__ bool router_pad_row(float *wts, int *ids, const int *live, int t, int k, int lane, int step) {
	if (!live || t < *live) return false;
	for (int j = lane; j < k; j += step) {
		ids[(long long)t * k + j] = -1;
		wts[(long long)t * k + j] = 0.0f;
	}
	return true;
}

// m_router_topk: per row of logits [n, E]: softmax, the k largest (ties:
// lower id), renormalised when norm; rows at or past *live route nowhere
// (router_pad_row; the step's rLive region). One thread per row, in the
// CPU's order.
extern "C" __global__ void m_router_topk(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= n || router_pad_row(wts, ids, live, t, k, 0, 1)) return;
	const act_t *row = logits + (long long)t * E;
	float mx = ld_act(row, 0);
	for (int c = 1; c < E; c++) mx = fmaxf(mx, ld_act(row, c));
	float sum = 0.0f;
	for (int c = 0; c < E; c++) sum += (float)exp((double)(ld_act(row, c) - mx));
	int *id = ids + (long long)t * k;
	float *w = wts + (long long)t * k;
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f;
		for (int c = 0; c < E; c++) {
			bool taken = false;
			for (int p = 0; p < j; p++)
				if (id[p] == c) taken = true;
			float v = ld_act(row, c);
			if (!taken && (best < 0 || v > bv)) {
				best = c;
				bv = v;
			}
		}
		id[j] = best;
		w[j] = (float)exp((double)(bv - mx)) / sum;
	}
	if (norm) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += w[j];
		for (int j = 0; j < k; j++) w[j] /= s;
	}
}

// warp_argmax leaves in every lane the warp's largest bv and its index
// best (ties to the lower index; best < 0 marks a lane with none).
__device__ __forceinline__ void warp_argmax(int &best, float &bv) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const int ob = __shfl_xor_sync(0xffffffffu, best, o);
		const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) {
			best = ob;
			bv = ov;
		}
	}
}

// m_router_topk_warp: m_router_topk with a warp per row (the row and its
// taken flags in shared memory): the same selection (the k largest logits,
// ties to the lower id) and weights e^{l−max}/Σe^{l−max} (renormalised when
// norm); only the softmax sum's order differs. grid ceil(n/4), block 128,
// smem 20·E bytes (4 rows of E floats, then 4 × E taken flags).
extern "C" __global__ void m_router_topk_warp(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	extern __shared__ float rsm[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int t = blockIdx.x * 4 + warp;
	if (t >= n || router_pad_row(wts, ids, live, t, k, lane, 32)) return; // the whole warp: no block-wide barriers below
	float *v = rsm + warp * E;
	unsigned char *taken = (unsigned char *)(rsm + 4 * E) + warp * E;
	const act_t *row = logits + (long long)t * E;
	float mx = -KT_INF;
	for (int c = lane; c < E; c += 32) {
		const float x = ld_act(row, c);
		v[c] = x;
		taken[c] = 0;
		mx = fmaxf(mx, x);
	}
	mx = warp_max(mx);
	float sum = 0.0f;
	for (int c = lane; c < E; c += 32) sum += (float)exp((double)(v[c] - mx));
	sum = warp_sum(sum);
	__syncwarp();
	int *id = ids + (long long)t * k;
	float *w = wts + (long long)t * k;
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f;
		for (int c = lane; c < E; c += 32)
			if (!taken[c] && (best < 0 || v[c] > bv)) {
				best = c;
				bv = v[c];
			}
		warp_argmax(best, bv);
		if (lane == 0) {
			id[j] = best;
			w[j] = (float)exp((double)(bv - mx)) / sum;
		}
		if (best >= 0 && lane == (best & 31)) taken[best] = 1;
		__syncwarp();
	}
	if (norm && lane == 0) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += w[j];
		for (int j = 0; j < k; j++) w[j] /= s;
	}
}

// m_router_topk_reg: m_router_topk_warp for E ≤ 256 and k ≤ 32 with the
// row in registers: lane l holds logits l, l+32, ... (ROUTER_REG at most)
// and their e^{l−max}; each of the k rounds is a scan of those registers
// and one warp argmax (ties to the lower id), the weights stay in lanes
// 0..k-1 until written. The same ids and weights as m_router_topk_warp,
// bit for bit: the same softmax sum order, the winner's summed e^{l−max},
// the renormalising sum in j order. grid ceil(n/4), block 128.
#define ROUTER_REG 8
extern "C" __global__ void m_router_topk_reg(float *wts, int *ids, const act_t *logits, int n, int E, int k, int norm, const int *live) {
	KT_GRID_DEP();
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int t = blockIdx.x * 4 + warp;
	if (t >= n || router_pad_row(wts, ids, live, t, k, lane, 32)) return; // the whole warp
	const act_t *row = logits + (long long)t * E;
	float v[ROUTER_REG], e[ROUTER_REG];
	float mx = -KT_INF;
#pragma unroll
	for (int m = 0; m < ROUTER_REG; m++) {
		const int c = lane + 32 * m;
		v[m] = c < E ? ld_act(row, c) : -KT_INF;
		if (c < E) mx = fmaxf(mx, v[m]);
	}
	mx = warp_max(mx);
	float sum = 0.0f;
#pragma unroll
	for (int m = 0; m < ROUTER_REG; m++) {
		e[m] = (float)exp((double)(v[m] - mx));
		if (lane + 32 * m < E) sum += e[m];
	}
	sum = warp_sum(sum);
	unsigned taken = 0; // bit m: logit lane + 32m is chosen
	int myid = -1;      // lane j < k: id j
	float myw = 0.0f;   // lane j < k: weight j
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f, be = 0.0f;
#pragma unroll
		for (int m = 0; m < ROUTER_REG; m++) {
			const int c = lane + 32 * m;
			if (c < E && !((taken >> m) & 1u) && (best < 0 || v[m] > bv)) {
				best = c;
				bv = v[m];
				be = e[m];
			}
		}
		warp_argmax(best, bv);
		// The winning lane's own best is the winner: its e^{l−max}.
		const float w = __shfl_sync(0xffffffffu, be, best & 31) / sum;
		if (best >= 0 && lane == (best & 31)) taken |= 1u << (best >> 5);
		if (lane == j) {
			myid = best;
			myw = w;
		}
	}
	if (norm) {
		float s = 0.0f;
		for (int j = 0; j < k; j++) s += __shfl_sync(0xffffffffu, myw, j);
		myw /= s;
	}
	if (lane < k) {
		ids[(long long)t * k + lane] = myid;
		wts[(long long)t * k + lane] = myw;
	}
}

// m_router_group_topk: DeepSeek-V3's router (Backend.RouterGroupTopK), a
// warp per row of logits [n, E]: s = sigmoid(logit) (in float64, as the
// CPU), c = s + bias (code bdt); each of the G groups of E/G experts scores
// the sum of its two largest c; the TG best groups (ties: the lower group)
// stay eligible and every other expert's c becomes 0; the k largest c
// (ties: the lower id) are the ids, their weights s, divided by their sum
// + 1e-20 when norm, times scale. Rows at or past *live route nowhere.
// grid n, block 32, shared memory (routerGroupSmem in mla.go): s [E] |
// c [E] | group scores [G] floats | group flags [G] ints | taken [E] bytes.
extern "C" __global__ void m_router_group_topk(float *wts, int *ids, const act_t *logits, const void *bias, int bdt, int n, int E, int G,
					       int TG, int k, int norm, float scale, const int *live) {
	KT_GRID_DEP();
	extern __shared__ float rsm[];
	const int t = blockIdx.x, lane = threadIdx.x & 31;
	if (t >= n || router_pad_row(wts, ids, live, t, k, lane, 32)) return; // the whole warp
	float *s = rsm, *c = rsm + E, *gs = rsm + 2 * E;
	int *keep = (int *)(gs + G);
	unsigned char *taken = (unsigned char *)(keep + G);
	const act_t *row = logits + (long long)t * E;
	for (int e = lane; e < E; e += 32) {
		const float v = sigmoid_d(ld_act(row, e));
		s[e] = v;
		c[e] = v + ldw(bias, e, bdt);
		taken[e] = 0;
	}
	__syncwarp();
	const int per = E / G;
	for (int g = lane; g < G; g += 32) {
		float a = -KT_INF, b = -KT_INF;
		for (int e = g * per; e < (g + 1) * per; e++) {
			const float v = c[e];
			if (v > a) {
				b = a;
				a = v;
			} else if (v > b) {
				b = v;
			}
		}
		gs[g] = a + b;
	}
	__syncwarp();
	for (int g = lane; g < G; g += 32) {
		int better = 0;
		for (int j = 0; j < G; j++)
			if (gs[j] > gs[g] || (gs[j] == gs[g] && j < g)) better++;
		keep[g] = better < TG;
	}
	__syncwarp();
	for (int e = lane; e < E; e += 32)
		if (!keep[e / per]) c[e] = 0.0f;
	__syncwarp();
	int *id = ids + (long long)t * k;
	float *w = wts + (long long)t * k;
	float sum = 0.0f;
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0.0f;
		for (int e = lane; e < E; e += 32)
			if (!taken[e] && (best < 0 || c[e] > bv)) {
				best = e;
				bv = c[e];
			}
		warp_argmax(best, bv);
		if (lane == 0) {
			id[j] = best;
			w[j] = s[best];
			sum += s[best];
		}
		if (best >= 0 && lane == (best & 31)) taken[best] = 1;
		__syncwarp();
	}
	if (lane == 0) {
		const float den = sum + 1e-20f;
		for (int j = 0; j < k; j++) {
			float v = w[j];
			if (norm) v /= den;
			w[j] = v * scale;
		}
	}
}
