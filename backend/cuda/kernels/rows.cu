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
