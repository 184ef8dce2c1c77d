// rope.cu: the rotary embedding of the op set (Backend.Rope).

// m_rope: NeoX rotate-half on the first rot dims of each head of x viewed as
// [n, heads, hd], position pos[t]. grid (n, heads), block >= rot/2.
extern "C" __global__ void m_rope(act_t *x, const int *pos, int heads, int hd, int rot, float theta) {
	KT_GRID_DEP();
	int t = blockIdx.x, h = blockIdx.y, half = rot / 2;
	long long base = ((long long)t * heads + h) * hd;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float e = (float)(2 * i) / (float)rot;
		float inv = (float)(1.0 / pow((double)theta, (double)e));
		float a = (float)pos[t] * inv;
		float c = (float)cos((double)a), s = (float)sin((double)a);
		float x1 = ld_act(x, base + i), x2 = ld_act(x, base + i + half);
		st_act(x, base + i, x1 * c - x2 * s);
		st_act(x, base + i + half, x2 * c + x1 * s);
	}
}
