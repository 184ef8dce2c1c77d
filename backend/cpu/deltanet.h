#ifndef KT_DELTANET_H
#define KT_DELTANET_H
#define GDN_CHUNK 64
#define GDN_W 16
typedef struct { int kh, vh, dk, dv; } gdn_shape;
typedef struct { float *S, *K, *V, *G; } gdn_state;
void gdn_group(int isa, int nkh, int nvh, int dk, int dv, float *S, float *K, float *V, float *G,
	const float *q, const float *k, const float *v, long ldqk, long ldv, const float *g, const float *beta,
	int n, int kh, int rows0, float *out, float *scratch);
void gdn_materialize(int isa, int nkh, int nvh, int dk, int dv, float *S, float *K, float *V, float *G, int rows, float *dec);
#endif
