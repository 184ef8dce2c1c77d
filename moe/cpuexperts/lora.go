//go:build linux && amd64 && cgo

package cpuexperts

/*
#include <stdlib.h>
#include "kt_moe.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ktserve/kt/backend"
)

// LoRA is one layer's expert LoRA for the engine (SGLang-KT's KT expert
// LoRA; KT's *_SFT methods): the backend's ExpertLoRA, whose doc gives the
// factor shapes and the math; the layer applies it to every token whatever
// the method of the base weights (kern_lora.c).
type LoRA = backend.ExpertLoRA

// loraScratch is the engine's per-task LoRA scratch, shared by its layers.
type loraScratch struct {
	rank int
	ptrs []unsafe.Pointer
	ax   [8]*C.float
	ad   [8]*C.float
	st   [8]*C.int
}

// SetLoRA makes the layer apply lo to every token (nil: none). The factors
// are copied to C memory.
func (l *Layer) SetLoRA(lo *LoRA) error {
	if l.c == nil {
		return fmt.Errorf("layer is closed")
	}
	if lo == nil {
		l.c.lora = nil
		return nil
	}
	E, H, I, r := l.spec.Experts, l.spec.Hidden, l.spec.Intermediate, lo.Rank
	if r < 1 || r > 1024 {
		return fmt.Errorf("expert LoRA rank %d outside [1,1024]", r)
	}
	if err := lo.Check(E, H, I); err != nil {
		return err
	}
	sc, err := l.e.loraScratch(r)
	if err != nil {
		return err
	}
	cl := (*C.kt_lora)(C.calloc(1, C.size_t(unsafe.Sizeof(C.kt_lora{}))))
	if cl == nil {
		return fmt.Errorf("out of memory for the expert LoRA")
	}
	l.cmem = append(l.cmem, unsafe.Pointer(cl))
	cl.r, cl.s, cl.isa = C.int(r), C.float(lo.Scale), C.int(l.e.bits)
	cl.hidden, cl.inter = C.int(H), C.int(I)
	copyF := func(v []float32) (*C.float, error) {
		p := C.malloc(C.size_t(4 * len(v)))
		if p == nil {
			return nil, fmt.Errorf("out of memory for the expert LoRA (%d values)", len(v))
		}
		l.cmem = append(l.cmem, p)
		copy(unsafe.Slice((*float32)(p), len(v)), v)
		return (*C.float)(p), nil
	}
	for _, f := range []struct {
		dst **C.float
		v   []float32
	}{{&cl.ga, lo.GateA}, {&cl.gb, lo.GateB}, {&cl.ua, lo.UpA}, {&cl.ub, lo.UpB}, {&cl.da, lo.DownA}, {&cl.db, lo.DownB}} {
		if *f.dst, err = copyF(f.v); err != nil {
			return err
		}
	}
	row := 0
	for p := 0; p < l.e.cfg.Pools; p++ {
		cl.row0[p] = C.int(row)
		row += l.e.inter[p]
		cl.ax[p], cl.ad[p], cl.st[p] = sc.ax[p], sc.ad[p], sc.st[p]
	}
	l.c.lora = cl
	return nil
}

// loraScratch returns the engine's LoRA scratch for rank r, allocating it
// on first use.
func (e *Engine) loraScratch(r int) (*loraScratch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lora != nil {
		if e.lora.rank != r {
			return nil, fmt.Errorf("expert LoRA rank %d, but another layer of this engine has rank %d", r, e.lora.rank)
		}
		return e.lora, nil
	}
	slots := int64(e.cfg.MaxTokens)*int64(e.cfg.TopK) + 32*int64(e.cfg.Experts) + 32
	sc := &loraScratch{rank: r}
	alloc := func(n int64) (unsafe.Pointer, error) {
		p := C.calloc(C.size_t(n), 1)
		if p == nil {
			return nil, fmt.Errorf("out of memory for the expert LoRA scratch (%d bytes)", n)
		}
		sc.ptrs = append(sc.ptrs, p)
		return p, nil
	}
	for p := 0; p < e.cfg.Pools; p++ {
		ax, err := alloc(slots * int64(2*r) * 4)
		if err != nil {
			sc.free()
			return nil, err
		}
		ad, err := alloc(slots * int64(r) * 4)
		if err != nil {
			sc.free()
			return nil, err
		}
		st, err := alloc(int64(e.cfg.Experts) * 2 * 4)
		if err != nil {
			sc.free()
			return nil, err
		}
		sc.ax[p], sc.ad[p], sc.st[p] = (*C.float)(ax), (*C.float)(ad), (*C.int)(st)
	}
	e.lora = sc
	return sc, nil
}

func (s *loraScratch) free() {
	if s == nil {
		return
	}
	for _, p := range s.ptrs {
		C.free(p)
	}
	s.ptrs = nil
}
