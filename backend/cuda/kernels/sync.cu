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
