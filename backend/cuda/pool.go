//go:build cgo

package cuda

import (
	"fmt"
	"sort"
	"sync"
)

// PoolAlign is the alignment of every pool allocation in bytes (enough for
// 16-byte vector loads and cuBLASLt's 256-byte preference).
const PoolAlign = 256

// poolReserve is kept out of the pool for what the driver, cuBLASLt and
// NVRTC-loaded modules allocate on their own.
const poolReserve = 512 << 20

// PoolSize returns the pool size for --mem-fraction-static frac: frac of the
// total memory, capped by what is free now minus a reserve for the driver,
// cuBLASLt and kernels. It fails with a message naming the flag when frac is
// out of (0, 1] or the result is too small to be useful.
func PoolSize(total, free int64, frac float64) (int64, error) {
	if !(frac > 0 && frac <= 1) {
		return 0, fmt.Errorf("cuda: --mem-fraction-static %.3g out of range (0, 1]", frac)
	}
	size := int64(float64(total) * frac)
	if limit := free - poolReserve; size > limit {
		size = limit
	}
	size &^= PoolAlign - 1
	if size < 64<<20 {
		return 0, fmt.Errorf("cuda: --mem-fraction-static %.3g leaves a %d MiB pool (%d MiB free of %d MiB): too small",
			frac, size>>20, free>>20, total>>20)
	}
	return size, nil
}

// Buffer is a range of device memory. The zero Buffer is empty.
type Buffer struct {
	Ptr  uint64 // device address
	Size int64  // bytes
	off  int64  // offset within the pool, -1 if not from a pool
	pool *Pool
}

// Slice returns the sub-range [off, off+n) of b (not separately freeable).
func (b Buffer) Slice(off, n int64) Buffer {
	if off < 0 || n < 0 || off+n > b.Size {
		panic(fmt.Sprintf("cuda: Buffer.Slice(%d, %d) out of range of %d bytes", off, n, b.Size))
	}
	return Buffer{Ptr: b.Ptr + uint64(off), Size: n, off: -1}
}

// arena is a first-fit allocator over [0, size) with coalescing; it knows
// nothing of CUDA so it can be tested anywhere.
type arena struct {
	size int64
	free []span // sorted by off, never adjacent
	used int64
}

type span struct{ off, n int64 }

func newArena(size int64) *arena {
	return &arena{size: size, free: []span{{0, size}}}
}

func alignUp(n, a int64) int64 { return (n + a - 1) &^ (a - 1) }

// alloc returns the offset of n bytes (rounded up to PoolAlign), or false.
func (a *arena) alloc(n int64) (int64, bool) {
	if n <= 0 {
		n = 1
	}
	n = alignUp(n, PoolAlign)
	for i, s := range a.free {
		if s.n < n {
			continue
		}
		off := s.off
		if s.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{s.off + n, s.n - n}
		}
		a.used += n
		return off, true
	}
	return 0, false
}

// release returns [off, off+n) to the free list, merging neighbours. It
// panics on a double free or a range outside the arena: both are bugs.
func (a *arena) release(off, n int64) {
	n = alignUp(max(n, 1), PoolAlign)
	if off < 0 || off+n > a.size {
		panic(fmt.Sprintf("cuda: pool free of [%d,+%d) outside the pool", off, n))
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off >= off })
	if (i < len(a.free) && a.free[i].off < off+n) || (i > 0 && a.free[i-1].off+a.free[i-1].n > off) {
		panic(fmt.Sprintf("cuda: double free of pool range [%d,+%d)", off, n))
	}
	a.used -= n
	mergePrev := i > 0 && a.free[i-1].off+a.free[i-1].n == off
	mergeNext := i < len(a.free) && off+n == a.free[i].off
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].n += n + a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergePrev:
		a.free[i-1].n += n
	case mergeNext:
		a.free[i].off = off
		a.free[i].n += n
	default:
		a.free = append(a.free, span{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = span{off, n}
	}
}

// largest returns the largest free span.
func (a *arena) largest() int64 {
	var m int64
	for _, s := range a.free {
		m = max(m, s.n)
	}
	return m
}

// Pool is the device memory kt uses: one allocation made at Open, sized
// from --mem-fraction-static, carved up by a first-fit allocator. Keeping
// one allocation means addresses stay fixed (CUDA graphs can be replayed)
// and the budget is enforced up front. Pool is safe for concurrent use.
type Pool struct {
	dev  *Device
	base uint64
	mu   sync.Mutex
	a    *arena
}

func newPool(d *Device, size int64) (*Pool, error) {
	ptr, err := d.memAlloc(size)
	if err != nil {
		return nil, fmt.Errorf("cuda: allocating the %d MiB memory pool: %w", size>>20, err)
	}
	return &Pool{dev: d, base: ptr, a: newArena(size)}, nil
}

// Alloc takes n bytes from the pool; what names the allocation in errors.
func (p *Pool) Alloc(n int64, what string) (Buffer, error) {
	if n < 0 {
		return Buffer{}, fmt.Errorf("cuda: allocating %s: negative size %d", what, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	off, ok := p.a.alloc(n)
	if !ok {
		return Buffer{}, fmt.Errorf("cuda: allocating %s (%d bytes): GPU memory pool exhausted (%d of %d MiB used, largest free block %d MiB); raise --mem-fraction-static or lower the KV budget",
			what, n, p.a.used>>20, p.a.size>>20, p.a.largest()>>20)
	}
	return Buffer{Ptr: p.base + uint64(off), Size: n, off: off, pool: p}, nil
}

// Free returns b to the pool. Slices and the zero Buffer are ignored.
func (p *Pool) Free(b Buffer) {
	if b.pool != p || b.off < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.a.release(b.off, b.Size)
}

func (p *Pool) release() error {
	if p.base == 0 {
		return nil
	}
	err := p.dev.memFree(p.base)
	p.base = 0
	return err
}
