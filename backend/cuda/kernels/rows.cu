// rows.cu: row gathers of the op set (Backend in backend_ops.go): the
// embedding lookup and GatherRows.

// m_embed: out[t] = table[tokens[t]] (ids were checked on the host). grid n.
extern "C" __global__ void m_embed(act_t *out, const void *table, int dt, const int *tokens, int H) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	long long src = (long long)tokens[t] * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) st_act(out, (long long)t * H + i, ldw(table, src + i, dt));
}

// m_embed_vocab: out[t] = table[tokens[t] - first] for tokens in [first,
// first+V), a zero row for the others (a vocabulary shard). grid n.
extern "C" __global__ void m_embed_vocab(act_t *out, const void *table, int dt, const int *tokens, int H, int first, int V) {
	KT_GRID_DEP();
	int t = blockIdx.x;
	int r = tokens[t] - first;
	if (r < 0 || r >= V) {
		for (int i = threadIdx.x; i < H; i += blockDim.x) st_act(out, (long long)t * H + i, 0.0f);
		return;
	}
	long long src = (long long)r * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) st_act(out, (long long)t * H + i, ldw(table, src + i, dt));
}

// m_gather_rows: out[j] = x[outrows[first + j]]. grid count.
extern "C" __global__ void m_gather_rows(act_t *out, const act_t *x, const int *outrows, int first, int d) {
	KT_GRID_DEP();
	int j = blockIdx.x;
	long long src = (long long)outrows[first + j] * d;
	for (int i = threadIdx.x; i < d; i += blockDim.x) st_act(out, (long long)j * d + i, ld_act(x, src + i));
}

// m_copy_cols: dst[r][dcol + c] = src[r][c] for c < w, rows of dld and sld
// elements (a tensor-parallel rank's columns in and out of the gather
// buffers). grid rows.
extern "C" __global__ void m_copy_cols(act_t *dst, int dld, int dcol, const act_t *src, int sld, int w) {
	KT_GRID_DEP();
	int r = blockIdx.x;
	for (int c = threadIdx.x; c < w; c += blockDim.x)
		st_act(dst, (long long)r * dld + dcol + c, ld_act(src, (long long)r * sld + c));
}

// m_tp_sum: elements [lo, hi) of np same-device buffers (a same-device
// tensor-parallel group's ranks): each summed over the ranks in order and
// the sum written into every buffer. Unused pointers are null.
extern "C" __global__ void m_tp_sum(act_t *p0, act_t *p1, act_t *p2, act_t *p3, act_t *p4, act_t *p5, act_t *p6, act_t *p7,
				    int np, long long lo, long long hi) {
	KT_GRID_DEP();
	act_t *p[8] = {p0, p1, p2, p3, p4, p5, p6, p7};
	for (long long i = lo + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += (long long)gridDim.x * blockDim.x) {
		float s = ld_act(p[0], i);
		for (int j = 1; j < np; j++) s += ld_act(p[j], i);
		for (int j = 0; j < np; j++) st_act(p[j], i, s);
	}
}
