// ktlayout.c: decode KTransformers' BufferB byte images (see ktlayout.go for
// the layout) into kt's row-major int8 / packed int4, and each row's largest
// |q|. Plain C; the caller has checked the shape and the sizes.
#include <stdint.h>
#include <string.h>

void kt_ktlayout_unpermute(const uint8_t* w, int n, int k, int bits, int nblock, int kblock, uint8_t* out,
                           int32_t* rowmax) {
  const int nstep = 32, kstep = bits == 4 ? 128 : 64;
  for (int nb0 = 0; nb0 < n; nb0 += nblock) {
    int nbs = n - nb0 < nblock ? n - nb0 : nblock;
    for (int kb0 = 0; kb0 < k; kb0 += kblock) {
      int kbs = k - kb0 < kblock ? k - kb0 : kblock;
      for (int nb = 0; nb < nbs; nb += nstep) {
        for (int kb = 0; kb < kbs; kb += kstep) {
          int64_t el = (int64_t)nb0 * k + (int64_t)kb0 * nbs + (int64_t)nb * kbs + (int64_t)kb * nstep;
          const uint8_t* panel = w + el * bits / 8;
          for (int i = 0; i < nstep; i++) {
            int64_t row = nb0 + nb + i;
            const uint8_t* src = panel + (i / 16) * 1024 + (i % 16) * 4;
            int col = kb0 + kb;
            if (bits == 8) {
              uint8_t* dst = out + row * k + col;
              for (int c = 0; c < 16; c++) memcpy(dst + c * 4, src + c * 64, 4);
            } else {
              uint8_t* lo = out + (row * k + col) / 2;
              uint8_t* hi = lo + 32;
              for (int c = 0; c < 16; c++) {
                const uint8_t* b = src + c * 64;
                lo[2 * c] = (uint8_t)((b[0] & 15) | (b[1] << 4));
                lo[2 * c + 1] = (uint8_t)((b[2] & 15) | (b[3] << 4));
                hi[2 * c] = (uint8_t)((b[0] >> 4) | (b[1] & 0xf0));
                hi[2 * c + 1] = (uint8_t)((b[2] >> 4) | (b[3] & 0xf0));
              }
            }
          }
        }
      }
    }
  }
  int64_t rb = (int64_t)k * bits / 8;
  for (int64_t r = 0; r < n; r++) {
    const uint8_t* p = out + r * rb;
    int m = 0;
    if (bits == 8) {
      for (int64_t j = 0; j < rb; j++) {
        int v = (int8_t)p[j];
        v = v < 0 ? -v : v;
        m = v > m ? v : m;
      }
    } else {
      uint8_t lut[256];  // larger magnitude of a byte's two signed nibbles
      for (int v = 0; v < 256; v++) {
        int a = v & 15, b = v >> 4;
        a = a >= 8 ? 16 - a : a;
        b = b >= 8 ? 16 - b : b;
        lut[v] = (uint8_t)(a > b ? a : b);
      }
      uint8_t mm = 0;
      for (int64_t j = 0; j < rb; j++) mm = lut[p[j]] > mm ? lut[p[j]] : mm;
      m = mm;
    }
    rowmax[r] = m;
  }
}
