// pack.c: portable packing, quantization and conversion helpers, and the
// kernel table. Nothing here uses instructions beyond the x86-64 baseline.
#include <math.h>
#include <string.h>

#include "kt_internal.h"

float kt_fp8f(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  union { uint32_t u; float f; } v;
  if (e == 15 && m == 7) return NAN;
  if (e == 0)
    v.f = (float)m * 0x1p-9f;
  else
    v.u = (uint32_t)(e + 120) << 23 | (uint32_t)m << 20;
  return (b & 0x80) ? -v.f : v.f;
}

void kt_bf16_to_f32(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = kt_bf16f(src[i]);
}

void kt_fp8_to_f32(const uint8_t* src, int64_t n, float* dst) {
  float lut[256];
  for (int i = 0; i < 256; i++) lut[i] = kt_fp8f((uint8_t)i);
  for (int64_t i = 0; i < n; i++) dst[i] = lut[src[i]];
}

static float row_amax(const float* r, int k) {
  float a = 0;
  for (int i = 0; i < k; i++) {
    float v = fabsf(r[i]);
    if (v > a) a = v;
  }
  return a;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

void kt_pack_bf16(const float* src, int64_t ld, int n, int k, uint16_t* dst) {
  for (int row = 0; row < n; row++) {
    const float* r = src + (int64_t)row * ld;
    uint16_t* panel = dst + (int64_t)(row / 16) * 16 * k;
    int rr = row % 16;
    for (int j = 0; j < k / 2; j++) {
      panel[(int64_t)j * 32 + rr * 2] = kt_f2bf(r[2 * j]);
      panel[(int64_t)j * 32 + rr * 2 + 1] = kt_f2bf(r[2 * j + 1]);
    }
  }
}

void kt_quant_rows_i8(const float* src, int64_t ld, int n, int k, int8_t* q, float* scale) {
  for (int row = 0; row < n; row++) {
    const float* r = src + (int64_t)row * ld;
    float amax = row_amax(r, k);
    float s = amax / 127.0f;
    float inv = s > 0 ? 1.0f / s : 0.0f;
    scale[row] = s;
    for (int i = 0; i < k; i++) q[(int64_t)row * k + i] = (int8_t)clampi((int)lrintf(r[i] * inv), -127, 127);
  }
}

void kt_quant_rows_i4(const float* src, int64_t ld, int n, int k, uint8_t* q, float* scale) {
  for (int row = 0; row < n; row++) {
    const float* r = src + (int64_t)row * ld;
    float amax = row_amax(r, k);
    float s = amax / 7.0f;
    float inv = s > 0 ? 1.0f / s : 0.0f;
    scale[row] = s;
    for (int i = 0; i < k; i += 2) {
      int a = clampi((int)lrintf(r[i] * inv), -7, 7);
      int b = clampi((int)lrintf(r[i + 1] * inv), -7, 7);
      q[(int64_t)row * (k / 2) + i / 2] = (uint8_t)((a & 15) | ((b & 15) << 4));
    }
  }
}

// kt_pack_q8_rows re-lays row-major int8 q (with per-row scale_in*scale_mul)
// into the panel layout.
void kt_pack_q8_rows(const int8_t* q, int n, int k, int8_t* dst, float scale_mul, const float* scale_in,
                     float* scale, int32_t* corr) {
  for (int row = 0; row < n; row++) {
    const int8_t* r = q + (int64_t)row * k;
    int8_t* panel = dst + (int64_t)(row / 16) * 16 * k;
    int rr = row % 16;
    int32_t sum = 0;
    for (int j = 0; j < k / 4; j++)
      for (int e = 0; e < 4; e++) {
        int8_t v = r[4 * j + e];
        panel[(int64_t)j * 64 + rr * 4 + e] = v;
        sum += v;
      }
    scale[row] = scale_in[row] * scale_mul;
    corr[row] = 128 * sum;
  }
}

void kt_pack_i8(const float* src, int64_t ld, int n, int k, int8_t* dst, float* scale, int32_t* corr) {
  int8_t q[k > 0 ? k : 1];
  float s;
  for (int row = 0; row < n; row++) {
    kt_quant_rows_i8(src + (int64_t)row * ld, ld, 1, k, q, &s);
    int8_t* panel = dst + (int64_t)(row / 16) * 16 * k;
    int rr = row % 16;
    int32_t sum = 0;
    for (int j = 0; j < k / 4; j++)
      for (int e = 0; e < 4; e++) {
        panel[(int64_t)j * 64 + rr * 4 + e] = q[4 * j + e];
        sum += q[4 * j + e];
      }
    scale[row] = s;
    corr[row] = 128 * sum;
  }
}

// put4 stores the low 4 bits of v (an int4 value -8..7, or a group-wise
// panel's unsigned code 0..15) for element kk of row rr into an int4 panel.
static void put4(uint8_t* panel, int rr, int kk, int v) {
  int c = kk / 128, off = kk % 128;
  int hi = off >= 64;
  int r = (off % 64) / 4, e = off % 4;
  uint8_t* b = panel + ((int64_t)c * 16 + r) * 64 + rr * 4 + e;
  if (hi)
    *b = (uint8_t)((*b & 0x0f) | ((v & 15) << 4));
  else
    *b = (uint8_t)((*b & 0xf0) | (v & 15));
}

void kt_pack_q4_rows(const uint8_t* q, int n, int k, uint8_t* dst, const float* scale_in, float* scale,
                     int32_t* corr) {
  for (int row = 0; row < n; row++) {
    const uint8_t* r = q + (int64_t)row * (k / 2);
    uint8_t* panel = dst + (int64_t)(row / 16) * 8 * k;
    int32_t sum = 0;
    for (int i = 0; i < k; i++) {
      int v = (r[i / 2] >> ((i & 1) * 4)) & 15;
      if (v >= 8) v -= 16;
      put4(panel, row % 16, i, v);
      sum += v * 16;
    }
    scale[row] = scale_in[row] / 16.0f;
    corr[row] = 128 * sum;
  }
}

void kt_pack_i4(const float* src, int64_t ld, int n, int k, uint8_t* dst, float* scale, int32_t* corr) {
  uint8_t q[k / 2 > 0 ? k / 2 : 1];
  float s;
  for (int row = 0; row < n; row++) {
    kt_quant_rows_i4(src + (int64_t)row * ld, ld, 1, k, q, &s);
    uint8_t* panel = dst + (int64_t)(row / 16) * 8 * k;
    int32_t sum = 0;
    for (int i = 0; i < k; i++) {
      int v = (q[i / 2] >> ((i & 1) * 4)) & 15;
      if (v >= 8) v -= 16;
      put4(panel, row % 16, i, v);
      sum += v * 16;
    }
    scale[row] = s / 16.0f;
    corr[row] = 128 * sum;
  }
}

// The int4 group scale: among the candidates amax/7 shrunk by 0, 5, ..., 40 %
// the one with the least squared error (clipping a few outliers buys finer
// steps). scale4_errs computes each candidate s[i] and its squared error
// e[i] (amax is row_amax(x, n)) and returns how many candidates there are
// (fewer than nine where s underflows to 0); kt_avx512_scale4_errs does the
// same float operations in the order of this loop for all nine at once
// (one vector's lanes, no fused multiply-adds), so both give the same bits.
static int scale4_errs(const float* x, int n, float amax, float* s9, float* e9) {
  int c = 0;
  for (int i = 0; i <= 8; i++) {
    float s = amax * (1.0f - 0.05f * (float)i) / 7.0f;
    if (s <= 0) break;
    float inv = 1.0f / s, err = 0;
    for (int j = 0; j < n; j++) {
      float q = (float)clampi((int)lrintf(x[j] * inv), -7, 7) * s - x[j];
      err += q * q;
    }
    s9[c] = s;
    e9[c++] = err;
  }
  return c;
}

// kt_scale4_errs (scale4_pick with the group's amax) is scale4_errs (vec 0)
// or its AVX-512 form (vec 1; the caller checks the CPU). Groups whose
// largest value is below 2^-100 take the scalar loop either way: there 1/s
// can overflow, and lrintf's out-of-range results are no vector operation.
static int scale4_pick(const float* x, int n, float amax, int vec, float* s9, float* e9) {
  return vec && amax >= 0x1p-100f ? kt_avx512_scale4_errs(x, n, amax, s9, e9) : scale4_errs(x, n, amax, s9, e9);
}

int kt_scale4_errs(const float* x, int n, int vec, float* s9, float* e9) {
  return scale4_pick(x, n, row_amax(x, n), vec, s9, e9);
}

// best_scale4 is the candidate with the least error, the first on ties
// (amax/7 where there is none: an all-zero group).
static float best_scale4(const float* x, int n, int vec) {
  float s9[9], e9[9], amax = row_amax(x, n);
  int c = scale4_pick(x, n, amax, vec, s9, e9);
  float best = amax / 7.0f, best_err = INFINITY;
  for (int i = 0; i < c; i++)
    if (e9[i] < best_err) {
      best_err = e9[i];
      best = s9[i];
    }
  return best;
}

void kt_pack_i4g(const float* src, int64_t ld, int n, int k, int group, uint8_t* dst, uint16_t* scale) {
  int ng = k / group;
  int vec = __builtin_cpu_supports("avx512f");  // the scale search in vector lanes, same bits
  for (int row = 0; row < n; row++) {
    const float* r = src + (int64_t)row * ld;
    uint8_t* panel = dst + (int64_t)(row / 16) * 8 * k;
    int p = row / 16, rr = row % 16;
    for (int g = 0; g < ng; g++) {
      // the scale as the panels keep it (bf16, per 16 v), and the values
      // quantized with that one
      uint16_t sb = kt_f2bf(best_scale4(r + g * group, group, vec) / 16.0f);
      float s = kt_bf16f(sb) * 16.0f, inv = s > 0 ? 1.0f / s : 0.0f;
      for (int i = g * group; i < (g + 1) * group; i++) put4(panel, rr, i, clampi((int)lrintf(r[i] * inv), -7, 7) + 8);
      scale[((int64_t)p * ng + g) * 16 + rr] = sb;
    }
  }
}

// spread4 moves the four nibbles of v (bits 0-15) to the low nibbles of
// four bytes.
static uint32_t spread4(uint32_t v) {
  v = (v | v << 8) & 0x00ff00ff;
  return (v | v << 4) & 0x0f0f0f0f;
}

// kt_pack_i4g_codes packs an n x k slice of a compressed-tensors
// pack-quantized INT4 matrix into KT_FMT_I4G_PK panels as it is: row r's
// codes are the k nibbles of words + r*wld (int32 words of eight, the
// lowest nibble first, a code being the signed value + 8, as the panels
// hold them), its group scales gscale + r*sld (one per group of columns).
// No value is re-quantized.
void kt_pack_i4g_codes(const uint32_t* words, int64_t wld, const float* gscale, int64_t sld, int n, int k, int group,
                       uint8_t* dst, uint16_t* scale) {
  int ng = k / group;
  for (int row = 0; row < n; row++) {
    const uint32_t* w = words + (int64_t)row * wld;
    uint8_t* panel = dst + (int64_t)(row / 16) * 8 * k;
    int p = row / 16, rr = row % 16;
    // a panel word (row rr, k-quad r of block c) holds columns 128c + 4r..+3
    // in its low nibbles and 64 columns on in its high ones: four codes of
    // one checkpoint word each, spread a nibble a byte
    for (int c = 0; c < k / 128; c++)
      for (int r = 0; r < 16; r++) {
        int j = 128 * c + 4 * r, sh = 4 * (j % 8);
        uint32_t v = spread4((w[j / 8] >> sh) & 0xffff) | spread4((w[(j + 64) / 8] >> sh) & 0xffff) << 4;
        memcpy(panel + ((int64_t)c * 16 + r) * 64 + rr * 4, &v, 4);
      }
    for (int g = 0; g < ng; g++) scale[((int64_t)p * ng + g) * 16 + rr] = kt_f2bf(gscale[(int64_t)row * sld + g] / 16.0f);
  }
}

// kt_pack_rm_to_bf16pk packs rows [n0, n0+nn) of a row-major bf16 or fp8
// matrix into bf16 panels (nn/16 panels of 16 x W->k), applying fp8 block scales.
void kt_pack_rm_to_bf16pk(const kt_mat* W, int n0, int nn, uint16_t* dst) {
  int k = W->k;
  if (W->w == NULL) return;
  for (int row = 0; row < nn; row++) {
    uint16_t* panel = dst + (int64_t)(row / 16) * 16 * k;
    int rr = row % 16;
    if (k == 0) continue;
    if (W->scale == NULL) {
      const uint16_t* r = (const uint16_t*)W->w + (int64_t)(n0 + row) * W->ld;
      const uint32_t* r32 = (const uint32_t*)r;
      uint32_t* p32 = (uint32_t*)panel;
      for (int j = 0; j < k / 2; j++) p32[(int64_t)j * 16 + rr] = r32[j];
    } else {
      const uint8_t* r = W->w + (int64_t)(n0 + row) * W->ld;
      int grow = W->row0 + n0 + row;
      const float* srow = W->scale + (int64_t)(grow / 128) * W->sld;
      for (int j = 0; j < k; j++) {
        float s = srow[(W->col0 + j) / 128];
        panel[(int64_t)(j / 2) * 32 + rr * 2 + (j & 1)] = kt_f2bf(kt_fp8f(r[j]) * s);
      }
    }
  }
}

void kt_row_to_act(const void* src, int src_bf16, int k, int act, void* dst, float* scale) {
  const float* sf = (const float*)src;
  const uint16_t* sb = (const uint16_t*)src;
  switch (act) {
    case KT_ACT_F32: {
      float* d = (float*)dst;
      if (src_bf16)
        for (int i = 0; i < k; i++) d[i] = kt_bf16f(sb[i]);
      else
        memcpy(d, sf, (size_t)k * 4);
      break;
    }
    case KT_ACT_BF16: {
      uint16_t* d = (uint16_t*)dst;
      if (src_bf16)
        memcpy(d, sb, (size_t)k * 2);
      else
        for (int i = 0; i < k; i++) d[i] = kt_f2bf(sf[i]);
      break;
    }
    case KT_ACT_S8: {
      int8_t* d = (int8_t*)dst;
      float amax = 0;
      for (int i = 0; i < k; i++) {
        float v = fabsf(src_bf16 ? kt_bf16f(sb[i]) : sf[i]);
        if (v > amax) amax = v;
      }
      float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
      for (int i = 0; i < k; i++) {
        float v = src_bf16 ? kt_bf16f(sb[i]) : sf[i];
        d[i] = (int8_t)clampi((int)lrintf(v * inv), -127, 127);
      }
      *scale = s;
      break;
    }
  }
}

int kt_act_format(int fmt, int isa) {
  switch (fmt) {
    case KT_FMT_I8_PK:
    case KT_FMT_I4_PK:
    case KT_FMT_I4G_PK:
      return KT_ACT_S8;
  }
  if (isa & (KT_ISA_AMX | KT_ISA_AVX512BF16)) return KT_ACT_BF16;
  return KT_ACT_F32;
}

kt_kernel kt_pick_kernel(int fmt, int level, int isa) {
  int bf16 = (isa & (KT_ISA_AMX | KT_ISA_AVX512BF16)) != 0;
  int vnni = (isa & KT_ISA_VNNI) != 0;
  if (level == KT_ISA_AMX) {  // row-major formats get their rows packed by the engine first
    int emu = (isa & KT_ISA_AMX_EMU) != 0;  // tests: the same kernels over emulated tiles
    switch (fmt) {
      case KT_FMT_BF16_PK: return emu ? kt_amx_emu_bf16pk : kt_amx_bf16pk;
      case KT_FMT_I8_PK: return emu ? kt_amx_emu_i8pk : kt_amx_i8pk;
      case KT_FMT_I4_PK: return emu ? kt_amx_emu_i4pk : kt_amx_i4pk;
      case KT_FMT_BF16_RM: return emu ? kt_amx_emu_bf16pk : kt_amx_bf16pk;
      case KT_FMT_FP8_RM: return emu ? kt_amx_emu_bf16pk : kt_amx_bf16pk;
      case KT_FMT_I4G_PK: return emu ? kt_amx_emu_i4gpk : kt_amx_i4gpk;
    }
    return NULL;
  }
  if (level == KT_ISA_AVX512 + 100) {  // prefill on row-major formats without AMX (rows packed first)
    switch (fmt) {
      case KT_FMT_BF16_RM:
      case KT_FMT_FP8_RM:
        return bf16 ? kt_avx512bf16_bf16pk : kt_avx512_bf16pk;
    }
    return kt_pick_kernel(fmt, KT_ISA_AVX512, isa);
  }
  if (level == KT_ISA_AVX512) {
    switch (fmt) {
      case KT_FMT_BF16_PK: return bf16 ? kt_avx512bf16_bf16pk : kt_avx512_bf16pk;
      case KT_FMT_BF16_RM: return bf16 ? kt_avx512bf16_bf16rm : kt_avx512_bf16rm;
      case KT_FMT_FP8_RM: return bf16 ? kt_avx512bf16_fp8rm : kt_avx512_fp8rm;
      case KT_FMT_I8_PK: return vnni ? kt_vnni_i8pk : kt_avx2_i8pk;
      case KT_FMT_I4_PK: return vnni ? kt_vnni_i4pk : kt_avx2_i4pk;
      case KT_FMT_I4G_PK: return vnni ? kt_vnni_i4gpk : kt_avx2_i4gpk;
    }
    return NULL;
  }
  switch (fmt) {
    case KT_FMT_BF16_PK: return kt_avx2_bf16pk;
    case KT_FMT_BF16_RM: return kt_avx2_bf16rm;
    case KT_FMT_FP8_RM: return kt_avx2_fp8rm;
    case KT_FMT_I8_PK: return kt_avx2_i8pk;
    case KT_FMT_I4_PK: return kt_avx2_i4pk;
    case KT_FMT_I4G_PK: return kt_avx2_i4gpk;
  }
  return NULL;
}

void kt_silu_mul(const float* g, const float* u, float* h, int n, int isa) {
  if (isa & KT_ISA_AVX512)
    kt_avx512_silu_mul(g, u, h, n);
  else
    kt_avx2_silu_mul(g, u, h, n);
}
