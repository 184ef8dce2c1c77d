//go:build linux && amd64 && cgo

package cpuexperts

/*
#include "kt_moe.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// ReadProbe measures the memory read bandwidth with a buffer it keeps, so
// that kt bench can take a sample before every measurement (interleaved with
// them) and report the median: on a shared machine the bandwidth moves from
// minute to minute, and a single sample taken once says little.
type ReadProbe struct {
	buf     unsafe.Pointer
	bytes   int64
	threads int
	bits    int
	samples []float64
}

// NewReadProbe allocates and fills a buffer of the given size (far larger
// than the last-level cache) read by the given number of threads.
func NewReadProbe(bytes int64, threads int) (*ReadProbe, error) {
	if bytes < 1<<20 || threads < 1 {
		return nil, fmt.Errorf("read probe: need >= 1 MiB and >= 1 thread")
	}
	feat := DetectFeatures()
	bits, err := feat.bits(ISAAuto)
	if err != nil {
		return nil, err
	}
	buf := C.kt_alloc(C.int64_t(bytes), -1)
	if buf == nil {
		return nil, fmt.Errorf("read probe: cannot allocate %d bytes", bytes)
	}
	b := unsafe.Slice((*byte)(buf), bytes)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return &ReadProbe{buf: buf, bytes: bytes, threads: threads, bits: bits}, nil
}

// Sample reads the buffer reps times and returns bytes per second; the
// sample is kept for Median.
func (p *ReadProbe) Sample(reps int) (float64, error) {
	if p.buf == nil {
		return 0, errors.New("read probe is closed")
	}
	if reps < 1 {
		return 0, fmt.Errorf("read probe: need >= 1 rep")
	}
	secs := float64(C.kt_stream_read(p.buf, C.int64_t(p.bytes), C.int(p.threads), C.int(reps), C.int(p.bits)))
	if secs <= 0 {
		return 0, fmt.Errorf("read probe: threads failed to start")
	}
	chunk := (p.bytes / int64(p.threads)) &^ 255
	bw := float64(chunk*int64(p.threads)*int64(reps)) / secs
	p.samples = append(p.samples, bw)
	return bw, nil
}

// Samples returns the samples taken so far, in order.
func (p *ReadProbe) Samples() []float64 { return append([]float64(nil), p.samples...) }

// Median returns the median of the samples taken so far (0 if none).
func (p *ReadProbe) Median() float64 { return Median(p.samples) }

// Reset forgets the samples taken so far.
func (p *ReadProbe) Reset() { p.samples = p.samples[:0] }

// Close frees the buffer.
func (p *ReadProbe) Close() {
	if p.buf != nil {
		C.kt_free(p.buf, C.int64_t(p.bytes))
		p.buf = nil
	}
}

// Median returns the median of xs (the mean of the middle two for an even
// count; 0 for none). xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Threads returns the number of threads that read the buffer.
func (p *ReadProbe) Threads() int { return p.threads }
