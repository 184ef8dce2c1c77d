package cpu

// StreamRead sums buf on all the backend's threads and returns the sum. It
// reads every byte once, sequentially per thread: the memory-bandwidth
// baseline that decode speed is compared with (see BenchmarkStreamRead).
func (b *Backend) StreamRead(buf []float32) float32 {
	parts := make([]float32, b.threads)
	b.pool.run(len(buf), 4096, func(w, lo, hi int) {
		if b.simd {
			parts[w] = sumSIMD(buf[lo:hi])
			return
		}
		var s float32
		for _, v := range buf[lo:hi] {
			s += v
		}
		parts[w] = s
	})
	var s float32
	for _, v := range parts {
		s += v
	}
	return s
}
