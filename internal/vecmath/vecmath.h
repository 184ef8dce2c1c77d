#ifndef KT_VECMATH_H
#define KT_VECMATH_H
#include <stdint.h>
int vm_level(void);
float vm_max(int level, const float* x, int64_t n);
double vm_sumexp(int level, float* x, int64_t n, float mx, int store);
#endif
