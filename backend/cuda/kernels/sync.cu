// sync.cu: the GPU's side of a hand-off from the host.

// m_wait_host holds the stream until the uint32 at flag, a word of pinned
// host memory the host (or the CPU expert engine) stores into, reaches v
// in the cyclic order of cuStreamWaitValue32's GEQ ((int)(*flag - v) >= 0):
// one thread reads the word over the bus (an acquire load at system scope,
// so that what the host wrote before its store is what the work behind
// reads), about a microsecond a read. Launched early, it lets a kernel
// behind it be scheduled at once; that kernel's own KT_GRID_DEP still waits
// for this one to end. Past timeout_ns of the GPU's global timer it traps
// rather than let the work behind run on inputs that never came (the host
// stores the value on every path; only a hung host gets there).
extern "C" __global__ void m_wait_host(const u32 *flag, u32 v, u64 timeout_ns) {
	KT_GRID_DEP();
	u64 t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	for (;;) {
		u32 f;
		asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(f) : "l"(flag) : "memory");
		if ((int)(f - v) >= 0) return;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		if (t - t0 > timeout_ns) asm volatile("trap;");
	}
}

// m_tp_barrier: the ranks of a same-device tensor-parallel group meet on
// the GPU, so that their collectives need no host between them and can be
// recorded in each rank's CUDA graph. One thread: the rank's counter
// (count[rank], device memory) goes up by one, then the thread waits until
// every rank's counter has reached the rank's own (every rank runs the same
// barriers in the same order, so counters differ by at most one), or until
// *stop (a word of pinned host memory) is set, or timeout_ns of the GPU's
// global timer pass (trap: a rank that never comes is a hung host). The
// fences before and after make the writes of the work before each rank's
// barrier visible to the work after every rank's.
extern "C" __global__ void m_tp_barrier(u32 *count, const u32 *stop, int rank, int np, u64 timeout_ns) {
	KT_GRID_DEP();
	__threadfence();
	u32 e = atomicAdd(&count[rank], 1u) + 1u;
	u64 t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	for (int j = 0; j < np; j++) {
		for (int spin = 0;; spin++) {
			u32 c;
			asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(c) : "l"(count + j) : "memory");
			if ((int)(c - e) >= 0) break;
			if ((spin & 63) == 63) {
				u32 a;
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(a) : "l"(stop) : "memory");
				if (a) return;
				asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
				if (t - t0 > timeout_ns) asm volatile("trap;");
				__nanosleep(100);
			}
		}
	}
	__threadfence();
}
