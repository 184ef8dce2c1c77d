// convert.h: row conversions, instantiated per ISA by kern_avx2.c and
// kern_avx512.c (each wraps these bodies in its own target attribute, so the
// compiler vectorizes them for that ISA). Not a public header.
#ifndef KT_CONVERT_BODY
#error "include from a kernel file with KT_CONVERT_BODY and KT_CONV_ATTR defined"
#endif
#ifndef KT_CONV_VEC
#define KT_CONV_VEC 0  // vector width of the hand-vectorized parts: 512, 256, or 0 (plain C)
#endif

// f32 -> bf16, round to nearest even, NaN kept NaN; branch-free for vectorization.
static inline KT_CONV_ATTR void CONV(f32_to_bf16)(const float* src, int n, uint16_t* dst) {
  const uint32_t* u = (const uint32_t*)src;
  for (int i = 0; i < n; i++) {
    uint32_t v = u[i];
    uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    uint32_t nan = (v >> 16) | 0x40u;
    dst[i] = (uint16_t)(((v & 0x7fffffffu) > 0x7f800000u) ? nan : r);
  }
}

static inline KT_CONV_ATTR void CONV(bf16_to_f32)(const uint16_t* src, int n, float* dst) {
  uint32_t* d = (uint32_t*)dst;
  for (int i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
}

// amax is the largest |x[i]|; NaNs are skipped. With intrinsics where the
// including file names its vector width (KT_CONV_VEC): the compiler does
// not vectorize the conditional maximum by itself, and a scalar amax was
// most of the int8 activation quantization (1.4 us of a 2048-wide row).
// MAXPS returns its second operand when the first is NaN, as the scalar
// comparison skips it, so every path gives the same value.
static inline KT_CONV_ATTR float CONV(amax)(const float* x, int n) {
  float a = 0;
  int i = 0;
#if KT_CONV_VEC == 512
  __m512 m = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
  a = _mm512_reduce_max_ps(m);
#elif KT_CONV_VEC == 256
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs), m);
  float l[8];
  _mm256_storeu_ps(l, m);
  for (int j = 0; j < 8; j++) a = l[j] > a ? l[j] : a;
#endif
  for (; i < n; i++) {
    float v = x[i] < 0 ? -x[i] : x[i];
    a = v > a ? v : a;
  }
  return a;
}

// symmetric per-row int8, scale amax/127
static inline KT_CONV_ATTR void CONV(quant_s8)(const float* x, int n, int8_t* q, float* scale) {
  float s = CONV(amax)(x, n) / 127.0f;
  float inv = s > 0 ? 1.0f / s : 0.0f;
  // round to nearest even as lrintf does under the default rounding mode (the
  // workers set it), but with the 1.5*2^23 trick, which vectorizes: lrintf
  // was a library call per element (~10 us per 2048-wide row). Without -ffast-math the compiler keeps
  // (v + c) - c as written
  int i = 0;
  // Hand-vectorized where the including file names its width: GCC's own
  // vectorization of the loop at the end narrows int32 to int8 poorly with
  // AVX2 (2.2 us per 2048-wide row). A NaN is quantized to 0, as the
  // portable quantization (pack.c) and the scalar loop do.
#if KT_CONV_VEC == 512
  const __m512 vinv = _mm512_set1_ps(inv), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f),
               rc = _mm512_set1_ps(12582912.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v), lo), hi);
    __m512i r = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(v, rc), rc));
    _mm_storeu_si128((__m128i*)(q + i), _mm512_cvtsepi32_epi8(r));
  }
#elif KT_CONV_VEC == 256
  // 32 values per step, packed with saturation (they are within +-127) and
  // put back in order
  const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f),
               rc = _mm256_set1_ps(12582912.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (; i + 32 <= n; i += 32) {
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vinv);
      v = _mm256_min_ps(_mm256_max_ps(_mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)), lo), hi);
      r[k] = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(v, rc), rc));
    }
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256((__m256i*)(q + i), _mm256_permutevar8x32_epi32(b, order));
  }
#endif
  for (; i < n; i++) {
    float v = x[i] * inv;
    v = v == v ? v : 0.0f;  // NaN: 0
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    q[i] = (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
  }
  *scale = s;
}

// kt_*_row_to_act: one row to the kernel's activation format; tmp holds n floats.
KT_CONV_ATTR void CONV(row_to_act)(const void* src, int src_bf16, int n, int act, void* dst, float* scale, float* tmp) {
  const float* f = (const float*)src;
  if (src_bf16) {
    if (act == KT_ACT_BF16) {
      const uint16_t* s = (const uint16_t*)src;
      uint16_t* d = (uint16_t*)dst;
      for (int i = 0; i < n; i++) d[i] = s[i];
      return;
    }
    CONV(bf16_to_f32)((const uint16_t*)src, n, act == KT_ACT_F32 ? (float*)dst : tmp);
    if (act == KT_ACT_F32) return;
    f = tmp;
  }
  switch (act) {
    case KT_ACT_F32: {
      float* d = (float*)dst;
      for (int i = 0; i < n; i++) d[i] = f[i];
      break;
    }
    case KT_ACT_BF16:
      CONV(f32_to_bf16)(f, n, (uint16_t*)dst);
      break;
    case KT_ACT_S8:
      CONV(quant_s8)(f, n, (int8_t*)dst, scale);
      break;
  }
}

// stream_line writes 64 bytes from src to the 64-byte aligned dst around
// the caches (plain stores where the file has no vector width).
static inline KT_CONV_ATTR void CONV(stream_line)(void* dst, const void* src) {
#if KT_CONV_VEC == 512
  _mm512_stream_si512(dst, _mm512_loadu_si512(src));
#elif KT_CONV_VEC == 256
  _mm256_stream_si256((__m256i*)dst, _mm256_loadu_si256((const __m256i*)src));
  _mm256_stream_si256((__m256i*)dst + 1, _mm256_loadu_si256((const __m256i*)src + 1));
#else
  memcpy(dst, src, 64);
#endif
}

// f32_to_bf16_out stores n f32 values as bf16 (f32_to_bf16), with nt
// around the caches (n a multiple of 32, dst 64-byte aligned: whole lines).
static inline KT_CONV_ATTR void CONV(f32_to_bf16_out)(const float* src, int n, uint16_t* dst, int nt) {
  if (!nt) {
    CONV(f32_to_bf16)(src, n, dst);
    return;
  }
  for (int j = 0; j < n; j += 32) {
    uint16_t line[32] __attribute__((aligned(64)));
    CONV(f32_to_bf16)(src + j, 32, line);
    CONV(stream_line)(dst + j, line);
  }
}

#ifndef KT_MERGE_CHUNK
#define KT_MERGE_CHUNK 256  // values per pass of the merge over a token's parts (1 KiB of f32 sums)
#endif

// kt_*_rows_bf16 stores rows x n f32 values (row stride lds) as bf16 rows
// of stride ldd, rounded as f32_to_bf16; nt: around the caches (n a multiple
// of 32 and every row 64-byte aligned: whole lines), for slot outputs that
// only the merge, after a barrier, reads back.
KT_CONV_ATTR void CONV(rows_bf16)(const float* src, int rows, int n, int lds, uint16_t* dst, int64_t ldd, int nt) {
  for (int i = 0; i < rows; i++) CONV(f32_to_bf16_out)(src + (int64_t)i * lds, n, dst + i * ldd, nt);
}

// kt_*_merge: out = (incr ? out : 0) + sum_i w[i] * parts[i]; tmp holds n
// floats. The parts are f32, or bf16 when parts_bf16 (slot outputs stored
// in bf16, kt_*_rows_bf16); the sum is f32 either way. nt (not with incr):
// out is stored around the caches (n a multiple of 32, out 64-byte aligned).
KT_CONV_ATTR void CONV(merge)(const void* const* parts, int parts_bf16, const float* w, int np, int n, void* out,
                              int out_bf16, int incr, int nt, float* tmp) {
  // in chunks of KT_MERGE_CHUNK values, every part's rows at once: a slot
  // output row of 2048 bf16 values is one 4 KiB page, where the hardware
  // prefetcher starts cold, so all the token's rows streaming together keep
  // more lines in flight than one row after another (each value's sum is
  // the same, in part order)
  for (int c0 = 0; c0 < n; c0 += KT_MERGE_CHUNK) {
    int c1 = n - c0 < KT_MERGE_CHUNK ? n : c0 + KT_MERGE_CHUNK;
    for (int i = c0; i < c1; i++) tmp[i] = 0;
    for (int p = 0; p < np; p++) {
      float wp = w[p];
      if (parts_bf16) {
        const uint16_t* x = (const uint16_t*)parts[p];
        for (int i = c0; i < c1; i++) tmp[i] += wp * kt_bf16f(x[i]);
        continue;
      }
      const float* x = (const float*)parts[p];
      for (int i = c0; i < c1; i++) tmp[i] += wp * x[i];
    }
  }
  if (out_bf16) {
    uint16_t* o = (uint16_t*)out;
    if (incr)
      for (int i = 0; i < n; i++) tmp[i] += kt_bf16f(o[i]);
    CONV(f32_to_bf16_out)(tmp, n, o, nt && !incr);
  } else {
    float* o = (float*)out;
    if (incr)
      for (int i = 0; i < n; i++) o[i] += tmp[i];
    else if (nt)
      for (int i = 0; i < n; i += 16) CONV(stream_line)(o + i, tmp + i);
    else
      for (int i = 0; i < n; i++) o[i] = tmp[i];
  }
}
