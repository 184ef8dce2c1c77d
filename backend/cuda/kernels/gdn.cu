// gdn.cu: Gated DeltaNet's linear attention in the op set
// (backend.LinearAttention in backend_linear.go): the causal conv1d and
// its state, the gates, and the gated delta rule in its chunked form and
// its decode-step form.

// Linear attention. State layouts (per slot, per linear layer):
//   conv:  [slots, layers, K-1, C]        float32, oldest row first
//   delta: [slots, layers, S | K | U | G]  float32, the chunked form (m_gdn_chunk)
// A sequence whose step span starts at position 0 reads zero state.

// m_conv1d: out[t, c] = silu(Σ_j w[c, j]·in(t-K+1+j, c)), earlier inputs
// from the state. grid (ceil(C/128), n), block 128.
extern "C" __global__ void m_conv1d(act_t *out, const act_t *x, const void *w, int wdt, const float *state, int layer,
				    int layers, const int *rowseq, const int *seq_start, const int *seq_pos,
				    const int *seq_slot, int C, int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (c >= C) return;
	const int s = rowseq[t], start = seq_start[s], j = t - start, hist = K - 1;
	const bool fresh = seq_pos[s] == 0;
	const float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C;
	float o = 0.0f;
	for (int kk = 0; kk < K; kk++) {
		int r = j - hist + kk;
		float v;
		if (r >= 0) v = ld_act(x, (long long)(start + r) * C + c);
		else v = fresh ? 0.0f : st[(long long)(hist + r) * C + c];
		o = fmaf(ldw(w, (long long)c * K + kk, wdt), v, o);
	}
	st_act(out, (long long)t * C + c, silu_d(o));
}

// m_conv_state: after m_conv1d, keep the last K-1 inputs of (state ++ the
// span's rows). grid (ceil(C/128), sequences), block 128.
extern "C" __global__ void m_conv_state(float *state, const act_t *x, int layer, int layers, const int *seq_start,
					const int *seq_len, const int *seq_pos, const int *seq_slot, int C, int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
	if (c >= C) return;
	const int hist = K - 1, start = seq_start[s], n = seq_len[s];
	const bool fresh = seq_pos[s] == 0;
	float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C;
	for (int i = 0; i < hist; i++) {
		int r = n - hist + i; // row of the span, negative: older state
		float v;
		if (r >= 0) v = ld_act(x, (long long)(start + r) * C + c);
		else v = fresh ? 0.0f : st[(long long)(hist + r) * C + c];
		st[(long long)i * C + c] = v;
	}
}

// m_conv1d_decode: m_conv1d then m_conv_state for a step whose every
// sequence has one row (a decode step), in one pass with the same
// arithmetic: out = silu(w·[state rows, x]) and the state moves up a row
// (x enters last). grid (ceil(C/128), sequences), block 128.
extern "C" __global__ void m_conv1d_decode(act_t *out, const act_t *x, const void *w, int wdt, float *state, int layer,
					   int layers, const int *seq_start, const int *seq_pos, const int *seq_slot, int C,
					   int K) {
	KT_GRID_DEP();
	const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
	if (c >= C) return;
	const int t = seq_start[s], hist = K - 1;
	const bool fresh = seq_pos[s] == 0;
	float *st = state + ((long long)seq_slot[s] * layers + layer) * hist * C + c;
	const float xv = ld_act(x, (long long)t * C + c);
	float o = 0.0f;
	for (int kk = 0; kk < hist; kk++) {
		const float v = fresh ? 0.0f : st[(long long)kk * C];
		o = fmaf(ldw(w, (long long)c * K + kk, wdt), v, o);
		if (kk > 0) st[(long long)(kk - 1) * C] = v;
	}
	o = fmaf(ldw(w, (long long)c * K + hist, wdt), xv, o);
	if (hist > 0) st[(long long)(hist - 1) * C] = xv;
	st_act(out, (long long)t * C + c, silu_d(o));
}

// m_delta_gates: g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b),
// over [n, Hv].
extern "C" __global__ void m_delta_gates(float *g, float *beta, const act_t *a, const act_t *b, const void *alog, int adt,
					 const void *dtb, int ddt, int Hv, long long n) {
	KT_GRID_DEP();
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	int h = i % Hv;
	float negA = -(float)exp((double)ldw(alog, h, adt));
	float x = ld_act(a, i) + ldw(dtb, h, ddt);
	float sp = x > 20.0f ? x : (float)log1p(exp((double)x));
	g[i] = negA * sp;
	beta[i] = sigmoid_d(ld_act(b, i));
}

// The gated delta rule in the chunked form the CPU backend keeps
// (backend/cpu.DeltaState): per (slot, layer) the recurrent state S at the
// last 64-token boundary of the sequence plus the rows of the open chunk,
//   S [Hv, Dk, Dv] | K [64, Hk, Dk] (normalised keys) |
//   U [64, Hv, Dv] (corrected values) | G [64, Hv] (cumulative log decay)
// (GDN_CHUNK rows, aligned to absolute positions). Within a chunk,
//   u_i = β_i(v_i − e^{G_i}·k_iᵀS) − Σ_{j<i} β_i(k_i·k_j)e^{G_i−G_j}·u_j
//   o_i = e^{G_i}·q_iᵀS + Σ_{j≤i} (q_i·k_j)e^{G_i−G_j}·u_j
// and when a chunk fills, S ← e^{G_63}·S + Σ_j e^{G_63−G_j}·k_j u_jᵀ.
// Every row is computed with the same arithmetic whatever rows arrived
// with it, so a prompt prefilled in pieces gives bit-identical outputs and
// state to one prefill. The rows of a chunk are processed together: the
// dot products, kᵀS/qᵀS, the outputs and the state update are parallel
// over rows; only the triangular solve for u runs row after row.
#define GDN_CHUNK 64
#define GDN_CB 32   // value columns per block
#define GDN_NT 128  // threads per block: 4 per column in the solve

// gdn_norm_row: dst[0..Dk) = l2norm(src)·scale by one warp (the CPU's l2Row:
// x·(1/sqrt(Σx² + 1e-6))·scale). m_gdn_chunk and m_gdn_commit both use it,
// so the keys they store agree bit for bit.
__device__ __forceinline__ void gdn_norm_row(const act_t *qkv, long long off, float *dst, int Dk, float scale, int lane) {
	float ss = 0.0f;
	for (int d = lane; d < Dk; d += 32) {
		float v = ld_act(qkv, off + d);
		dst[d] = v;
		ss = fmaf(v, v, ss);
	}
	ss = warp_sum(ss);
	const float inv = (float)(1.0 / sqrt((double)(ss + 1e-6f)));
	__syncwarp();
	for (int d = lane; d < Dk; d += 32) dst[d] = (dst[d] * inv) * scale;
	__syncwarp();
}

// gdn_sum8 combines 8 partial sums as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)):
// the order an xor butterfly over 8 lanes (offsets 1, 2, 4) gives too.
__device__ __forceinline__ float gdn_sum8(const float *a) {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// gdn_dot: Σ_d a[d]·b[d·sb] over d < n in the gated delta rule's fixed
// order: 8 partial sums over d ≡ p (mod 8), ascending, by fused
// multiply-adds, combined by gdn_sum8. m_gdn_decode spreads the same
// partial sums over 8 lanes or 8 warps, so both kernels round alike.
__device__ __forceinline__ float gdn_dot(const float *a, const float *b, int sb, int n) {
	float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
	for (int d0 = 0; d0 < n; d0 += 8)
#pragma unroll
		for (int p = 0; p < 8; p++)
			if (d0 + p < n) acc[p] = fmaf(a[d0 + p], b[(long long)(d0 + p) * sb], acc[p]);
	return gdn_sum8(acc);
}

// m_gdn_chunk: grid (Hv, ceil(Dv/GDN_CB), sequences), block GDN_NT, dynamic
// smem per gdnChunkSmem (Go). Rows are processed in segments of at most
// segcap (≤ 64, the step's longest span) so a decode step takes little
// shared memory and several blocks fit on an SM. Reads the open chunk's K,
// U and G from the state and writes S (when a chunk filled or the sequence
// is fresh) and U; m_gdn_commit then writes K and G (other blocks of the
// same head read them here, so they are written after this grid).
extern "C" __global__ void __launch_bounds__(GDN_NT) m_gdn_chunk(act_t *out, const act_t *qkv, const float *g, const float *beta,
								   float *state, int layer, int layers, const int *seq_start,
								   const int *seq_len, const int *seq_pos, const int *seq_slot, int C,
								   int Hk, int Hv, int Dk, int Dv, int segcap) {
	KT_GRID_DEP();
	extern __shared__ float sm[];
	const int ldk = Dk + 1, ldc = GDN_CB + 1, ldr = GDN_CHUNK + 1;
	float *Ss = sm;                      // [Dk][ldc]
	float *Ks = Ss + Dk * ldc;           // [64][ldk] normalised keys of the chunk
	float *Us = Ks + GDN_CHUNK * ldk;    // [64][ldc] u rows, this block's columns
	// Segment rows (index i − r):
	float *Qs = Us + GDN_CHUNK * ldc;    // [segcap][ldk] normalised, scaled queries
	float *Os = Qs + segcap * ldk;       // [segcap][ldc] e^{G_i}·q_iᵀS
	float *A = Os + segcap * ldc;        // [segcap][ldr] −β_i(k_i·k_j)e^{G_i−G_j}, j < i
	float *Bq = A + segcap * ldr;        // [segcap][ldr] (q_i·k_j)e^{G_i−G_j}, j ≤ i (no decay at j = i)
	float *Gs = Bq + segcap * ldr;       // [64] cumulative log decay
	float *Bs = Gs + GDN_CHUNK;          // [64] beta
	float *Ds = Bs + GDN_CHUNK;          // [64] e^{G_last − G_j} at a flush

	const int h = blockIdx.x, s = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int x0 = blockIdx.y * GDN_CB;
	const int kh = h / (Hv / Hk);
	const int start = seq_start[s], n = seq_len[s], pos = seq_pos[s];
	const bool fresh = pos == 0;
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Sg = base + (long long)h * Dk * Dv;
	const float *Kg = base + (long long)Hv * Dk * Dv;
	float *Ug = (float *)Kg + (long long)GDN_CHUNK * Hk * Dk;
	const float *Gg = Ug + (long long)GDN_CHUNK * Hv * Dv;
	const float scale = (float)(1.0 / sqrt((double)Dk));
	const int vw = Hv * Dv;
	const long long qoff = (long long)kh * Dk, koff = (long long)Hk * Dk + (long long)kh * Dk, voff = 2LL * Hk * Dk + (long long)h * Dv;

	// Load the S tile and the open rows.
	for (int i = tid; i < Dk * GDN_CB; i += GDN_NT) {
		int d = i / GDN_CB, x = i % GDN_CB;
		Ss[d * ldc + x] = (fresh || x0 + x >= Dv) ? 0.0f : Sg[(long long)d * Dv + x0 + x];
	}
	const int rows0 = pos % GDN_CHUNK; // 0 when fresh
	for (int i = tid; i < rows0 * Dk; i += GDN_NT) {
		int j = i / Dk, d = i % Dk;
		Ks[j * ldk + d] = Kg[((long long)j * Hk + kh) * Dk + d];
	}
	for (int i = tid; i < rows0 * GDN_CB; i += GDN_NT) {
		int j = i / GDN_CB, x = i % GDN_CB;
		Us[j * ldc + x] = x0 + x < Dv ? Ug[((long long)j * Hv + h) * Dv + x0 + x] : 0.0f;
	}
	for (int j = tid; j < rows0; j += GDN_NT) Gs[j] = Gg[(long long)j * Hv + h];

	bool flushed = false;
	int r = rows0;
	for (int t = 0; t < n;) {
		const int seg = min(min(GDN_CHUNK - r, n - t), segcap), end = r + seg;
		__syncthreads();
		// q and k rows of the segment, one warp per row.
		for (int i = r + warp; i < end; i += GDN_NT / 32) {
			const long long row = (long long)(start + t + i - r) * C;
			gdn_norm_row(qkv, row + qoff, Qs + (i - r) * ldk, Dk, scale, lane);
			gdn_norm_row(qkv, row + koff, Ks + i * ldk, Dk, 1.0f, lane);
		}
		if (tid == 0) {
			float acc = r > 0 ? Gs[r - 1] : 0.0f;
			for (int i = r; i < end; i++) {
				const long long gi = (long long)(start + t + i - r) * Hv + h;
				acc = i == 0 ? g[gi] : g[gi] + acc; // i == 0 only when r == 0
				Gs[i] = acc;
				Bs[i] = beta[gi];
			}
		}
		__syncthreads();
		// Dot products with the chunk's keys, decays folded in.
		for (int p = tid; p < seg * GDN_CHUNK; p += GDN_NT) {
			const int i = r + p / GDN_CHUNK, j = p % GDN_CHUNK;
			if (j > i) continue;
			const float *ki = Ks + i * ldk, *qi = Qs + (i - r) * ldk, *kj = Ks + j * ldk;
			const float kk = gdn_dot(ki, kj, 1, Dk), qk = gdn_dot(qi, kj, 1, Dk);
			if (j == i) {
				Bq[(i - r) * ldr + j] = qk;
			} else {
				const float dec = (float)exp((double)(Gs[i] - Gs[j]));
				A[(i - r) * ldr + j] = (-Bs[i] * kk) * dec;
				Bq[(i - r) * ldr + j] = qk * dec;
			}
		}
		// kᵀS and qᵀS: the right-hand side of the solve and the state part of o.
		for (int p = tid; p < seg * GDN_CB; p += GDN_NT) {
			const int i = r + p / GDN_CB, x = p % GDN_CB;
			const float *ki = Ks + i * ldk, *qi = Qs + (i - r) * ldk;
			const float ks = gdn_dot(ki, Ss + x, ldc, Dk), qs = gdn_dot(qi, Ss + x, ldc, Dk);
			const float ei = (float)exp((double)Gs[i]);
			const float v = x0 + x < Dv ? ld_act(qkv, (long long)(start + t + i - r) * C + voff + x0 + x) : 0.0f;
			Us[i * ldc + x] = Bs[i] * fmaf(-ei, ks, v);
			Os[(i - r) * ldc + x] = ei * qs;
		}
		__syncthreads();
		// Forward substitution, row after row: 4 lanes per column, each
		// summing the rows j ≡ sub (mod 4), combined in a fixed order.
		{
			const int x = tid >> 2, sub = tid & 3;
			for (int i = r; i < end; i++) {
				float part = 0.0f;
				for (int j = sub; j < i; j += 4) part = fmaf(A[(i - r) * ldr + j], Us[j * ldc + x], part);
				part += __shfl_xor_sync(0xffffffffu, part, 1);
				part += __shfl_xor_sync(0xffffffffu, part, 2);
				if (sub == 0) Us[i * ldc + x] += part;
				__syncwarp();
			}
		}
		__syncthreads();
		// Outputs: 4 partial sums over j ≡ sub (mod 4) combined as the
		// solve combines its lanes' (m_gdn_decode's order).
		for (int p = tid; p < seg * GDN_CB; p += GDN_NT) {
			const int i = r + p / GDN_CB, x = p % GDN_CB;
			float a[4];
#pragma unroll
			for (int sub = 0; sub < 4; sub++) {
				a[sub] = 0.0f;
				for (int j = sub; j <= i; j += 4) a[sub] = fmaf(Bq[(i - r) * ldr + j], Us[j * ldc + x], a[sub]);
			}
			const float o = Os[(i - r) * ldc + x] + ((a[0] + a[1]) + (a[2] + a[3]));
			if (x0 + x < Dv) st_act(out, (long long)(start + t + i - r) * vw + (long long)h * Dv + x0 + x, o);
		}
		t += seg;
		if (end < GDN_CHUNK) {
			r = end;
			continue;
		}
		// The chunk is full: fold it into S.
		for (int j = tid; j < GDN_CHUNK; j += GDN_NT) Ds[j] = (float)exp((double)(Gs[GDN_CHUNK - 1] - Gs[j]));
		__syncthreads();
		const float el = (float)exp((double)Gs[GDN_CHUNK - 1]);
		for (int p = tid; p < Dk * GDN_CB; p += GDN_NT) {
			const int d = p / GDN_CB, x = p % GDN_CB;
			float v = Ss[d * ldc + x] * el;
			for (int j = 0; j < GDN_CHUNK; j++) v = fmaf(Ds[j] * Ks[j * ldk + d], Us[j * ldc + x], v);
			Ss[d * ldc + x] = v;
		}
		flushed = true;
		r = 0;
	}
	__syncthreads();
	if (flushed || fresh)
		for (int i = tid; i < Dk * GDN_CB; i += GDN_NT) {
			int d = i / GDN_CB, x = i % GDN_CB;
			if (x0 + x < Dv) Sg[(long long)d * Dv + x0 + x] = Ss[d * ldc + x];
		}
	// The open chunk's new u rows (r is the number of open rows now).
	const int first = flushed ? 0 : rows0;
	for (int i = tid; i < (r - first) * GDN_CB; i += GDN_NT) {
		int j = first + i / GDN_CB, x = i % GDN_CB;
		if (x0 + x < Dv) Ug[((long long)j * Hv + h) * Dv + x0 + x] = Us[j * ldc + x];
	}
}

// m_gdn_commit: after m_gdn_chunk, store the open chunk's new normalised
// keys (value heads that are the first of their key head) and cumulative
// log decays. grid (Hv, sequences), block 32.
extern "C" __global__ void __launch_bounds__(32) m_gdn_commit(const act_t *qkv, const float *g, float *state, int layer, int layers,
								const int *seq_start, const int *seq_len, const int *seq_pos,
								const int *seq_slot, int C, int Hk, int Hv, int Dk, int Dv) {
	KT_GRID_DEP();
	extern __shared__ float sm[]; // [Dk]
	const int h = blockIdx.x, s = blockIdx.y, lane = threadIdx.x;
	const int rep = Hv / Hk, kh = h / rep;
	const int start = seq_start[s], n = seq_len[s], pos = seq_pos[s];
	const int rows0 = pos % GDN_CHUNK, rend = (pos + n) % GDN_CHUNK;
	if (rend == 0) return; // no open rows
	const bool crossed = rows0 + n >= GDN_CHUNK;
	const int first = crossed ? 0 : rows0; // first new row of the open chunk
	const int t0 = n - (rend - first);     // its token index in the span
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Kg = base + (long long)Hv * Dk * Dv;
	float *Gg = Kg + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv;
	if (h % rep == 0) {
		const long long koff = (long long)Hk * Dk + (long long)kh * Dk;
		for (int i = first; i < rend; i++) {
			gdn_norm_row(qkv, (long long)(start + t0 + i - first) * C + koff, sm, Dk, 1.0f, lane);
			for (int d = lane; d < Dk; d += 32) Kg[((long long)i * Hk + kh) * Dk + d] = sm[d];
			__syncwarp();
		}
	}
	if (lane == 0) {
		// The same recurrence as m_gdn_chunk: a chunk's first row starts
		// afresh, later rows add to the previous one.
		float acc = first > 0 ? Gg[(long long)(first - 1) * Hv + h] : 0.0f;
		for (int i = first; i < rend; i++) {
			const float gv = g[(long long)(start + t0 + i - first) * Hv + h];
			acc = i == 0 ? gv : gv + acc;
			Gg[(long long)i * Hv + h] = acc;
		}
	}
}

// m_gdn_decode: m_gdn_chunk followed by m_gdn_commit for a step whose
// every sequence has one row (a decode step), with the same arithmetic,
// so a decode step and a one-row prefill piece agree bit for bit. The row
// is row i = pos mod 64 of the open chunk; only it is new, so one grid
// reads the earlier rows' K, U, G and writes row i's (no commit kernel).
// Block (h, column block, sequence) of GDN_DNT threads:
//   - thread (warp w, lane x) holds S[d][x0+x] for d ≡ w (mod 8) in
//     registers (Dk ≤ 128): S is read once, written only when the row
//     completes the chunk (the flush) or the sequence is fresh;
//   - kᵀS and qᵀS: warp w's partial sums over its keys, combined as
//     gdn_dot combines them;
//   - k_i·k_j and q_i·k_j for j ≤ i: 8 lanes per row j (gdn_dot's order);
//   - the solve and the output: 4 lanes per column as in m_gdn_chunk.
// grid (Hv, ceil(Dv/GDN_CB), sequences), block GDN_DNT, dynamic smem
// gdnDecodeSmem (Go).
#define GDN_DNT 256
extern "C" __global__ void __launch_bounds__(GDN_DNT) m_gdn_decode(act_t *out, const act_t *qkv, const float *g, const float *beta,
								     float *state, int layer, int layers, const int *seq_start,
								     const int *seq_pos, const int *seq_slot, int C, int Hk, int Hv,
								     int Dk, int Dv) {
	KT_GRID_DEP();
	extern __shared__ float sm[];
	const int ldc = GDN_CB + 1;
	float *qn = sm, *kn = qn + Dk;          // this row's normalised (scaled) q and k
	float *Us = kn + Dk;                    // [64][ldc] u rows, this block's columns
	float *Gs = Us + GDN_CHUNK * ldc;       // [64] cumulative log decay
	float *A = Gs + GDN_CHUNK;              // [64] −β(k_i·k_j)e^{G_i−G_j}, j < i
	float *Bq = A + GDN_CHUNK;              // [64] (q_i·k_j)e^{G_i−G_j}, j ≤ i
	float *Ds = Bq + GDN_CHUNK;             // [64] e^{G_63 − G_j} at a flush
	float *Rk = Ds + GDN_CHUNK;             // [8][GDN_CB] partial sums of kᵀS
	float *Rq = Rk + 8 * GDN_CB;            // [8][GDN_CB] partial sums of qᵀS

	const int h = blockIdx.x, s = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int x0 = blockIdx.y * GDN_CB, col = x0 + lane;
	const int rep = Hv / Hk, kh = h / rep;
	const int row = seq_start[s], pos = seq_pos[s], i = pos % GDN_CHUNK;
	const bool fresh = pos == 0;
	const long long per = (long long)Hv * Dk * Dv + (long long)GDN_CHUNK * Hk * Dk + (long long)GDN_CHUNK * Hv * Dv + GDN_CHUNK * Hv;
	float *base = state + ((long long)seq_slot[s] * layers + layer) * per;
	float *Sg = base + (long long)h * Dk * Dv;
	float *Kg = base + (long long)Hv * Dk * Dv;
	float *Ug = Kg + (long long)GDN_CHUNK * Hk * Dk;
	float *Gg = Ug + (long long)GDN_CHUNK * Hv * Dv;
	const float scale = (float)(1.0 / sqrt((double)Dk));
	const long long roff = (long long)row * C;

	float Sr[16]; // S[warp + 8m][col]
#pragma unroll
	for (int m = 0; m < 16; m++) {
		const int d = warp + 8 * m;
		Sr[m] = (!fresh && d < Dk && col < Dv) ? Sg[(long long)d * Dv + col] : 0.0f;
	}
	for (int p = tid; p < i * GDN_CB; p += GDN_DNT) {
		const int j = p / GDN_CB, x = p % GDN_CB;
		Us[j * ldc + x] = x0 + x < Dv ? Ug[((long long)j * Hv + h) * Dv + x0 + x] : 0.0f;
	}
	for (int j = tid; j < i; j += GDN_DNT) Gs[j] = Gg[(long long)j * Hv + h];
	const long long gi = (long long)row * Hv + h;
	const float bt = beta[gi];
	const float Gi = i == 0 ? g[gi] : g[gi] + Gg[(long long)(i - 1) * Hv + h];
	if (warp == 0) gdn_norm_row(qkv, roff + (long long)kh * Dk, qn, Dk, scale, lane);
	else if (warp == 1) gdn_norm_row(qkv, roff + (long long)Hk * Dk + (long long)kh * Dk, kn, Dk, 1.0f, lane);
	else if (tid == 64) Gs[i] = Gi;
	__syncthreads();

	// Warp w's partial sums of kᵀS and qᵀS.
	float pk = 0.0f, pq = 0.0f;
#pragma unroll
	for (int m = 0; m < 16; m++) {
		const int d = warp + 8 * m;
		if (d < Dk) {
			pk = fmaf(kn[d], Sr[m], pk);
			pq = fmaf(qn[d], Sr[m], pq);
		}
	}
	Rk[warp * GDN_CB + lane] = pk;
	Rq[warp * GDN_CB + lane] = pq;
	// Dot products with the chunk's keys (row i's own key at j = i), decays folded in.
	const int p8 = tid & 7;
	for (int j0 = 0; j0 <= i; j0 += GDN_DNT / 8) {
		const int j = j0 + (tid >> 3);
		float kk = 0.0f, qk = 0.0f;
		if (j <= i) {
			const float *kj = j < i ? Kg + ((long long)j * Hk + kh) * Dk : kn;
			for (int d = p8; d < Dk; d += 8) {
				const float kv = kj[d];
				kk = fmaf(kn[d], kv, kk);
				qk = fmaf(qn[d], kv, qk);
			}
		}
#pragma unroll
		for (int o = 1; o < 8; o <<= 1) {
			kk += __shfl_xor_sync(0xffffffffu, kk, o);
			qk += __shfl_xor_sync(0xffffffffu, qk, o);
		}
		if (p8 == 0 && j <= i) {
			if (j == i) {
				Bq[j] = qk;
			} else {
				const float dec = (float)exp((double)(Gi - Gs[j]));
				A[j] = (-bt * kk) * dec;
				Bq[j] = qk * dec;
			}
		}
	}
	__syncthreads();

	// u_i and o_i, 4 lanes per column (m_gdn_chunk's solve and output).
	if (tid < 4 * GDN_CB) {
		const int x = tid >> 2, sub = tid & 3;
		float rk[8], rq[8];
#pragma unroll
		for (int p = 0; p < 8; p++) {
			rk[p] = Rk[p * GDN_CB + x];
			rq[p] = Rq[p * GDN_CB + x];
		}
		const float ei = (float)exp((double)Gi);
		const float v = x0 + x < Dv ? ld_act(qkv, roff + 2LL * Hk * Dk + (long long)h * Dv + x0 + x) : 0.0f;
		float u = bt * fmaf(-ei, gdn_sum8(rk), v);
		const float os = ei * gdn_sum8(rq);
		float pa = 0.0f, pb = 0.0f;
		for (int j = sub; j < i; j += 4) {
			const float uj = Us[j * ldc + x];
			pa = fmaf(A[j], uj, pa);
			pb = fmaf(Bq[j], uj, pb);
		}
		pa += __shfl_xor_sync(0xffffffffu, pa, 1);
		pa += __shfl_xor_sync(0xffffffffu, pa, 2);
		u += pa;
		if (sub == (i & 3)) pb = fmaf(Bq[i], u, pb);
		pb += __shfl_xor_sync(0xffffffffu, pb, 1);
		pb += __shfl_xor_sync(0xffffffffu, pb, 2);
		if (sub == 0) {
			Us[i * ldc + x] = u;
			if (x0 + x < Dv) {
				st_act(out, (long long)row * Hv * Dv + (long long)h * Dv + x0 + x, os + pb);
				if (i < GDN_CHUNK - 1) Ug[((long long)i * Hv + h) * Dv + x0 + x] = u;
			}
		}
	}
	if (i < GDN_CHUNK - 1) {
		// Commit row i's key (first value head of its key head) and decay.
		if (blockIdx.y == 0) {
			if (h % rep == 0)
				for (int d = tid; d < Dk; d += GDN_DNT) Kg[((long long)i * Hk + kh) * Dk + d] = kn[d];
			if (tid == 0) Gg[(long long)i * Hv + h] = Gi;
		}
		if (fresh && col < Dv)
#pragma unroll
			for (int m = 0; m < 16; m++) {
				const int d = warp + 8 * m;
				if (d < Dk) Sg[(long long)d * Dv + col] = 0.0f;
			}
		return;
	}
	// The chunk is full: fold it into S.
	for (int j = tid; j < GDN_CHUNK; j += GDN_DNT) Ds[j] = (float)exp((double)(Gi - Gs[j]));
	__syncthreads();
	const float el = (float)exp((double)Gi);
#pragma unroll
	for (int m = 0; m < 16; m++) Sr[m] *= el;
	for (int j = 0; j < GDN_CHUNK; j++) { // rows outermost: 16 independent sums per thread
		const float *kj = j < GDN_CHUNK - 1 ? Kg + ((long long)j * Hk + kh) * Dk : kn;
		const float dj = Ds[j], uj = Us[j * ldc + lane];
#pragma unroll
		for (int m = 0; m < 16; m++) {
			const int d = warp + 8 * m;
			if (d < Dk) Sr[m] = fmaf(dj * kj[d], uj, Sr[m]);
		}
	}
	if (col < Dv)
#pragma unroll
		for (int m = 0; m < 16; m++) {
			const int d = warp + 8 * m;
			if (d < Dk) Sg[(long long)d * Dv + col] = Sr[m];
		}
}
