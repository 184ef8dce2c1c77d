// Gated delta rule kernels, included twice by deltanet.c: once for AVX-512
// (GDN_AVX512 = 1) and once as portable C. GDN_NAME prefixes every symbol and
// GDN_TARGET carries the per-function target attribute, so the file builds
// with plain gcc on any x86-64 and the AVX-512 code runs only when CPUID
// says it may.

// y[0:n] += a * x[0:n]
GDN_TARGET static inline void GDN_NAME(axpy)(float a, const float *x, float *y, int n) {
	int i = 0;
#if GDN_AVX512
	__m512 va = _mm512_set1_ps(a);
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
	}
#else
	for (; i < n; i++) y[i] += a * x[i];
#endif
}

GDN_TARGET static inline float GDN_NAME(dot)(const float *x, const float *y, int n) {
	int i = 0;
#if GDN_AVX512
	__m512 acc = _mm512_setzero_ps();
	for (; i + 16 <= n; i += 16)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc);
	}
	return _mm512_reduce_add_ps(acc);
#else
	float s = 0;
	for (; i < n; i++) s += x[i] * y[i];
	return s;
#endif
}

// out = l2normalize(x) * scale, with transformers' rsqrt(sum(x^2) + 1e-6).
GDN_TARGET static inline void GDN_NAME(l2)(const float *x, float scale, float *out, int n) {
	float ss = GDN_NAME(dot)(x, x, n);
	float inv = 1.0f / sqrtf(ss + 1e-6f);
	for (int i = 0; i < n; i++) out[i] = (x[i] * inv) * scale;
}

// qs = q^T S, ks = k^T S for S [dk, dv], in one pass over S.
GDN_TARGET static void GDN_NAME(spass)(const float *S, const float *q, const float *k, float *qs, float *ks, int dk, int dv) {
#if GDN_AVX512
	for (int x0 = 0; x0 < dv; x0 += 64) {
		__m512 aq0 = _mm512_setzero_ps(), aq1 = aq0, aq2 = aq0, aq3 = aq0;
		__m512 ak0 = aq0, ak1 = aq0, ak2 = aq0, ak3 = aq0;
		int w = dv - x0 < 64 ? dv - x0 : 64;
		__mmask16 m0 = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
		__mmask16 m1 = w >= 32 ? 0xffff : w <= 16 ? 0 : (__mmask16)((1u << (w - 16)) - 1);
		__mmask16 m2 = w >= 48 ? 0xffff : w <= 32 ? 0 : (__mmask16)((1u << (w - 32)) - 1);
		__mmask16 m3 = w >= 64 ? 0xffff : w <= 48 ? 0 : (__mmask16)((1u << (w - 48)) - 1);
		for (int d = 0; d < dk; d++) {
			const float *row = S + (size_t)d * dv + x0;
			__m512 bq = _mm512_set1_ps(q[d]), bk = _mm512_set1_ps(k[d]);
			__m512 s0 = _mm512_maskz_loadu_ps(m0, row);
			__m512 s1 = _mm512_maskz_loadu_ps(m1, row + 16);
			__m512 s2 = _mm512_maskz_loadu_ps(m2, row + 32);
			__m512 s3 = _mm512_maskz_loadu_ps(m3, row + 48);
			aq0 = _mm512_fmadd_ps(bq, s0, aq0); ak0 = _mm512_fmadd_ps(bk, s0, ak0);
			aq1 = _mm512_fmadd_ps(bq, s1, aq1); ak1 = _mm512_fmadd_ps(bk, s1, ak1);
			aq2 = _mm512_fmadd_ps(bq, s2, aq2); ak2 = _mm512_fmadd_ps(bk, s2, ak2);
			aq3 = _mm512_fmadd_ps(bq, s3, aq3); ak3 = _mm512_fmadd_ps(bk, s3, ak3);
		}
		_mm512_mask_storeu_ps(qs + x0, m0, aq0); _mm512_mask_storeu_ps(ks + x0, m0, ak0);
		_mm512_mask_storeu_ps(qs + x0 + 16, m1, aq1); _mm512_mask_storeu_ps(ks + x0 + 16, m1, ak1);
		_mm512_mask_storeu_ps(qs + x0 + 32, m2, aq2); _mm512_mask_storeu_ps(ks + x0 + 32, m2, ak2);
		_mm512_mask_storeu_ps(qs + x0 + 48, m3, aq3); _mm512_mask_storeu_ps(ks + x0 + 48, m3, ak3);
	}
#else
	for (int x = 0; x < dv; x++) qs[x] = ks[x] = 0;
	for (int d = 0; d < dk; d++) {
		const float *row = S + (size_t)d * dv;
		float a = q[d], b = k[d];
		for (int x = 0; x < dv; x++) {
			qs[x] += a * row[x];
			ks[x] += b * row[x];
		}
	}
#endif
}

// Folds rows 0..rows-1 of the open chunk of value head h (key head kh) into
// S: S = e^{G_last}·S + Σ_j e^{G_last-G_j} k_j u_jᵀ, four rows of S at a time
// kept in registers across j. dec holds 5*GDN_CHUNK floats of scratch.
GDN_TARGET static void GDN_NAME(flush)(const gdn_shape *sh, gdn_state *st, int kh, int h, int rows, float *dec) {
	int dk = sh->dk, dv = sh->dv;
	float *S = st->S + (size_t)h * dk * dv;
	float *kc = dec + GDN_CHUNK; // [rows][4] coefficients for four rows of S
	float gl = st->G[(size_t)(rows - 1) * sh->vh + h];
	float el = expf(gl);
	for (int j = 0; j < rows; j++) dec[j] = expf(gl - st->G[(size_t)j * sh->vh + h]);
	for (int d0 = 0; d0 < dk; d0 += 4) {
		int nd = dk - d0 < 4 ? dk - d0 : 4;
		for (int j = 0; j < rows; j++)
			for (int r = 0; r < 4; r++)
				kc[j * 4 + r] = r < nd ? dec[j] * st->K[((size_t)j * sh->kh + kh) * dk + d0 + r] : 0.0f;
		for (int x0 = 0; x0 < dv; x0 += GDN_W) {
			int w = dv - x0 < GDN_W ? dv - x0 : GDN_W;
#if GDN_AVX512
			__mmask16 m = w == 16 ? 0xffff : (__mmask16)((1u << w) - 1);
			__m512 ve = _mm512_set1_ps(el);
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
			float *r0 = S + (size_t)d0 * dv + x0;
			a0 = _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, r0));
			if (nd > 1) a1 = _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, r0 + dv));
			if (nd > 2) a2 = _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, r0 + 2 * dv));
			if (nd > 3) a3 = _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, r0 + 3 * dv));
			for (int j = 0; j < rows; j++) {
				__m512 vj = _mm512_maskz_loadu_ps(m, st->V + ((size_t)j * sh->vh + h) * dv + x0);
				a0 = _mm512_fmadd_ps(_mm512_set1_ps(kc[j * 4]), vj, a0);
				a1 = _mm512_fmadd_ps(_mm512_set1_ps(kc[j * 4 + 1]), vj, a1);
				a2 = _mm512_fmadd_ps(_mm512_set1_ps(kc[j * 4 + 2]), vj, a2);
				a3 = _mm512_fmadd_ps(_mm512_set1_ps(kc[j * 4 + 3]), vj, a3);
			}
			_mm512_mask_storeu_ps(r0, m, a0);
			if (nd > 1) _mm512_mask_storeu_ps(r0 + dv, m, a1);
			if (nd > 2) _mm512_mask_storeu_ps(r0 + 2 * dv, m, a2);
			if (nd > 3) _mm512_mask_storeu_ps(r0 + 3 * dv, m, a3);
#else
			for (int r = 0; r < nd; r++) {
				float *row = S + (size_t)(d0 + r) * dv + x0;
				for (int x = 0; x < w; x++) {
					float a = el * row[x];
					for (int j = 0; j < rows; j++)
						a += kc[j * 4 + r] * st->V[((size_t)j * sh->vh + h) * dv + x0 + x];
					row[x] = a;
				}
			}
#endif
		}
	}
}

// Computes one row's corrected value u and output o for columns 0..dv-1:
// u = b·(v − e·ks) + Σ_{j<i} cu_j·U_j;  o = e·qs + Σ_{j<i} co_j·U_j + qii·u,
// with U_j = U0 + j·stride, keeping u and o in registers across j.
GDN_TARGET static void GDN_NAME(rowout)(const float *U0, size_t stride, int i, const float *cu, const float *co, float qii,
	float b, float e, const float *v, const float *ks, const float *qs, float *u, float *o, int dv) {
	for (int x0 = 0; x0 < dv; x0 += GDN_W) {
		int w = dv - x0 < GDN_W ? dv - x0 : GDN_W;
#if GDN_AVX512
		__mmask16 m = w == 16 ? 0xffff : (__mmask16)((1u << w) - 1);
		__m512 vb = _mm512_set1_ps(b), ve = _mm512_set1_ps(e);
		__m512 au = _mm512_mul_ps(vb, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, v + x0), _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, ks + x0))));
		__m512 ao = _mm512_mul_ps(ve, _mm512_maskz_loadu_ps(m, qs + x0));
		for (int j = 0; j < i; j++) {
			__m512 uj = _mm512_maskz_loadu_ps(m, U0 + j * stride + x0);
			au = _mm512_fmadd_ps(_mm512_set1_ps(cu[j]), uj, au);
			ao = _mm512_fmadd_ps(_mm512_set1_ps(co[j]), uj, ao);
		}
		ao = _mm512_fmadd_ps(_mm512_set1_ps(qii), au, ao);
		_mm512_mask_storeu_ps(u + x0, m, au);
		_mm512_mask_storeu_ps(o + x0, m, ao);
#else
		for (int x = x0; x < x0 + w; x++) {
			float au = b * (v[x] - e * ks[x]);
			float ao = e * qs[x];
			for (int j = 0; j < i; j++) {
				float uj = U0[j * stride + x];
				au += cu[j] * uj;
				ao += co[j] * uj;
			}
			u[x] = au;
			o[x] = ao + qii * au;
		}
#endif
	}
}

// Runs tokens 0..n-1 of key-head group kh, the open chunk holding rows0 rows
// before the first. q and k rows are ldqk floats apart, v rows ldv; g, beta
// and out are dense [n, vh] and [n, vh, dv]. scratch holds 2*dk + 2*dv + 9*GDN_CHUNK floats.
GDN_TARGET static void GDN_NAME(group)(const gdn_shape *sh, gdn_state *st, const float *q, const float *k, const float *v,
	size_t ldqk, size_t ldv, const float *g, const float *beta, int n, int kh, int rows0, float *out, float *scratch) {
	int dk = sh->dk, dv = sh->dv, rep = sh->vh / sh->kh;
	float scale = 1.0f / sqrtf((float)dk);
	float *qn = scratch, *kn = qn + dk, *qs = kn + dk, *ks = qs + dv;
	float *qk = ks + dv, *kk = qk + GDN_CHUNK, *cu = kk + GDN_CHUNK, *co = cu + GDN_CHUNK, *dec = co + GDN_CHUNK;
	int i = rows0;
	for (int t = 0; t < n; t++) {
		size_t base = (size_t)t * ldqk + (size_t)kh * dk;
		GDN_NAME(l2)(q + base, scale, qn, dk);
		GDN_NAME(l2)(k + base, 1.0f, kn, dk);
		float *krow = st->K + ((size_t)i * sh->kh + kh) * dk;
		for (int d = 0; d < dk; d++) krow[d] = kn[d];
		for (int j = 0; j <= i; j++) {
			const float *kj = st->K + ((size_t)j * sh->kh + kh) * dk;
			qk[j] = GDN_NAME(dot)(qn, kj, dk);
			kk[j] = GDN_NAME(dot)(kn, kj, dk);
		}
		for (int r = 0; r < rep; r++) {
			int h = kh * rep + r;
			size_t col = (size_t)t * sh->vh + h;
			float gi = g[col];
			if (i > 0) gi += st->G[(size_t)(i - 1) * sh->vh + h];
			st->G[(size_t)i * sh->vh + h] = gi;
			float b = beta[col];
			GDN_NAME(spass)(st->S + (size_t)h * dk * dv, qn, kn, qs, ks, dk, dv);
			float ei = expf(gi);
			float *u = st->V + ((size_t)i * sh->vh + h) * dv;
			const float *vi = v + (size_t)t * ldv + (size_t)h * dv;
			float *o = out + col * dv;
			for (int j = 0; j < i; j++) {
				float dj = expf(gi - st->G[(size_t)j * sh->vh + h]);
				cu[j] = -b * kk[j] * dj;
				co[j] = qk[j] * dj;
			}
			GDN_NAME(rowout)(st->V + (size_t)h * dv, (size_t)sh->vh * dv, i, cu, co, qk[i], b, ei, vi, ks, qs, u, o, dv);
		}
		if (++i == GDN_CHUNK) {
			for (int r = 0; r < rep; r++) GDN_NAME(flush)(sh, st, kh, kh * rep + r, GDN_CHUNK, dec);
			i = 0;
		}
	}
}
