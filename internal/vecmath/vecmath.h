#ifndef KT_VECMATH_H
#define KT_VECMATH_H
#include <stdint.h>
int vm_level(void);
float vm_max(int level, const float* x, int64_t n);
double vm_sumexp(int level, float* x, int64_t n, float mx, int store);
float vm_scalemax(int level, float* x, int64_t n, float s);
int64_t vm_above(int level, const float* x, int64_t n, float thr, int32_t* out);
double vm_expblocks(int level, float* x, int64_t n, float mx, int64_t bs, double* out);
#endif
