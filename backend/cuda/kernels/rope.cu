// Rotary position embedding, in place on rows [tokens, heads, head_dim]
// (token stride given, so q and k can live inside a packed projection).
// Rotation is NeoX style (rotate_half) over the first rot_dim dims; the
// rest pass through (partial rotary). cos/sin are computed in float32 as
// Hugging Face does and rounded to bf16 before use, as are the products.
//   mode 0: position pos[t] for every frequency.
//   mode 1: Qwen3.5 interleaved M-RoPE: frequency j takes its position from
//           axis 1 (H) if j%3==1 && j<3*sec1, axis 2 (W) if j%3==2 &&
//           j<3*sec2, else axis 0 (T); pos is [3, T].
// grid (T, heads), block rot_dim/2 threads.
extern "C" __global__ void rope_bf16(bf16 *x, const int *pos, int T, int head_dim, int rot_dim, long long tok_stride,
				     float theta, int mode, int sec1, int sec2) {
	KT_GRID_DEP();
	int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x, half = rot_dim / 2;
	if (j >= half) return;
	int axis = 0;
	if (mode == 1) {
		if (j % 3 == 1 && j < 3 * sec1) axis = 1;
		else if (j % 3 == 2 && j < 3 * sec2) axis = 2;
	}
	float p = (float)pos[axis * T + t];
	float inv = 1.0f / powf(theta, (float)(2 * j) / (float)rot_dim);
	float f = p * inv;
	float c = rbf(cosf(f)), s = rbf(sinf(f));
	bf16 *row = x + (long long)t * tok_stride + (long long)h * head_dim;
	float a = bf2f(row[j]), b = bf2f(row[j + half]);
	row[j] = f2bf(rbf(a * c) + rbf(-b * s));
	row[j + half] = f2bf(rbf(b * c) + rbf(a * s));
}
