package tp

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tensor"
)

func TestLayout(t *testing.T) {
	for _, c := range []struct {
		rank, size, heads, kv int
		q, k                  Span
	}{
		{0, 1, 8, 2, Span{0, 8}, Span{0, 2}},
		{1, 2, 8, 2, Span{4, 4}, Span{1, 1}},
		{3, 4, 8, 8, Span{6, 2}, Span{6, 2}},
		// fewer kv heads than ranks: each replicated over size/kv ranks
		{0, 4, 4, 2, Span{0, 1}, Span{0, 1}},
		{1, 4, 4, 2, Span{1, 1}, Span{0, 1}},
		{2, 4, 4, 2, Span{2, 1}, Span{1, 1}},
		{3, 4, 8, 1, Span{6, 2}, Span{0, 1}},
	} {
		l := Layout{Rank: c.rank, Size: c.size}
		if err := l.CheckAttention(c.heads, c.kv); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		q, k := l.Split(c.heads), l.KVHeads(c.heads, c.kv)
		if q != c.q || k != c.k {
			t.Errorf("%+v: heads %v kv %v", c, q, k)
		}
		// every local query head reads a local kv head
		for h := q.First; h < q.First+q.Count; h++ {
			if kh := h / (c.heads / c.kv); kh < k.First || kh >= k.First+k.Count {
				t.Errorf("%+v: query head %d reads kv head %d outside %v", c, h, kh, k)
			}
		}
	}
}

func TestLayoutRefusals(t *testing.T) {
	for _, c := range []struct {
		size, heads, kv int
		want            string
	}{
		{3, 8, 2, "num_attention_heads: 8 does not divide over tensor-parallel size 3"},
		{4, 8, 6, "num_key_value_heads: 6 does not divide"},
		{8, 8, 3, "not a multiple of the 3 kv heads"},
	} {
		err := Layout{Size: c.size}.CheckAttention(c.heads, c.kv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c, err, c.want)
		}
	}
	if err := (Layout{Size: 4}).CheckVocab(3); err == nil {
		t.Error("a vocabulary of 3 over 4 ranks accepted")
	}
}

func TestVocab(t *testing.T) {
	for _, c := range []struct {
		v, size int
		want    []Span
	}{
		{1000, 4, []Span{{0, 250}, {250, 250}, {500, 250}, {750, 250}}},
		{10, 3, []Span{{0, 4}, {4, 4}, {8, 2}}},
		{7, 1, []Span{{0, 7}}},
	} {
		ws := GatherWidths(c.v, c.size)
		for r, w := range c.want {
			if got := (Layout{Rank: r, Size: c.size}).Vocab(c.v); got != w || ws[r] != w.Count {
				t.Errorf("vocab %d over %d: rank %d %v (gather width %d), want %v", c.v, c.size, r, got, ws[r], w)
			}
		}
	}
}

// ranks runs fn on every rank of g concurrently.
func ranks(g Group, fn func(r int, c Comm)) {
	var wg sync.WaitGroup
	for r := range g.Size() {
		wg.Add(1)
		go func() { defer wg.Done(); fn(r, g.Comm(r)) }()
	}
	wg.Wait()
}

func alloc(t *testing.T, be *cpu.Backend, vals []float32, shape ...int) backend.Tensor {
	t.Helper()
	x, err := be.Alloc(tensor.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	copy(x.(*cpu.Tensor).F32(), vals)
	return x
}

func TestLocalCollectives(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	for _, n := range []int{1, 2, 3, 4} {
		g, err := NewLocal(n)
		if err != nil {
			t.Fatal(err)
		}
		xs := make([]backend.Tensor, n)
		bs := make([]backend.Tensor, n)
		gs := make([]backend.Tensor, n)
		outs := make([]backend.Tensor, n)
		W := 0
		for r := range n {
			// [4 rows, 3 cols]: x[i][j] = 100r + 10i + j; 3 rows are used
			v := make([]float32, 12)
			for i := range v {
				v[i] = float32(100*r + 10*(i/3) + i%3)
			}
			xs[r] = alloc(t, be, v, 4, 3)
			bs[r] = alloc(t, be, v, 4, 3)
			// rank r's gather input is r+1 columns wide
			gv := make([]float32, 4*(r+1))
			for i := range gv {
				gv[i] = float32(1000*r + i)
			}
			gs[r] = alloc(t, be, gv, 4, r+1)
			W += r + 1
		}
		for r := range n {
			outs[r] = alloc(t, be, nil, 4, W)
		}
		ranks(g, func(r int, c Comm) {
			c.AllReduce(xs[r], 3)
			c.Broadcast(bs[r], 3)
			c.AllGatherCols(outs[r], gs[r], 3)
		})
		for r := range n {
			if err := g.Comm(r).Err(); err != nil {
				t.Fatalf("n=%d rank %d: %v", n, r, err)
			}
			x, b, o := xs[r].(*cpu.Tensor).F32(), bs[r].(*cpu.Tensor).F32(), outs[r].(*cpu.Tensor).F32()
			for i := range 4 {
				for j := range 3 {
					want := float32(100*n*(n-1)/2 + n*(10*i+j))
					if i == 3 { // past n rows: untouched
						want = float32(100*r + 10*i + j)
					}
					if x[i*3+j] != want {
						t.Errorf("n=%d rank %d AllReduce [%d,%d] = %v, want %v", n, r, i, j, x[i*3+j], want)
					}
					wb := float32(10*i + j)
					if i == 3 {
						wb = float32(100*r + 10*i + j)
					}
					if b[i*3+j] != wb {
						t.Errorf("n=%d rank %d Broadcast [%d,%d] = %v, want %v", n, r, i, j, b[i*3+j], wb)
					}
				}
			}
			for i := range 3 {
				off := 0
				for q := range n {
					for j := range q + 1 {
						if got, want := o[i*W+off+j], float32(1000*q+i*(q+1)+j); got != want {
							t.Errorf("n=%d rank %d AllGatherCols [%d, rank %d col %d] = %v, want %v", n, r, i, q, j, got, want)
						}
					}
					off += q + 1
				}
			}
		}
	}
}

func TestLocalAbort(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	g, _ := NewLocal(3)
	xs := []backend.Tensor{alloc(t, be, nil, 2, 2), alloc(t, be, nil, 2, 2), alloc(t, be, nil, 2, 2)}
	boom := errors.New("boom")
	ranks(g, func(r int, c Comm) {
		if r == 1 { // fails before its collective: the others must not wait forever
			g.Abort(boom)
			return
		}
		c.AllReduce(xs[r], 2)
	})
	for _, r := range []int{0, 2} {
		if err := g.Comm(r).Err(); !errors.Is(err, boom) {
			t.Errorf("rank %d: %v, want the aborting rank's error", r, err)
		}
	}
	g.Reset()
	ranks(g, func(r int, c Comm) { c.AllReduce(xs[r], 2) })
	for r := range 3 {
		if err := g.Comm(r).Err(); err != nil {
			t.Errorf("after Reset: rank %d: %v", r, err)
		}
	}
}

func TestLocalMismatch(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	g, _ := NewLocal(2)
	xs := []backend.Tensor{alloc(t, be, nil, 2, 2), alloc(t, be, nil, 2, 3)}
	ranks(g, func(r int, c Comm) { c.AllReduce(xs[r], 2) })
	for r := range 2 {
		if err := g.Comm(r).Err(); err == nil || !strings.Contains(err.Error(), "elements") {
			t.Errorf("rank %d: %v, want a size mismatch", r, err)
		}
	}
	if err := g.Comm(0).Err(); err != nil {
		t.Errorf("Err did not clear: %v", err)
	}
}

// TestCheckModel checks the refusals of real config shapes by field, all
// at once, and that one rank always passes.
func TestCheckModel(t *testing.T) {
	c := &modelconfig.Config{NumLayers: 4, NumHeads: 16, NumKVHeads: 4, VocabSize: 1000, IntermediateSize: 96,
		SharedExpertIntermediateSize: 48, Linear: modelconfig.LinearAttentionDims{NumKeyHeads: 2, NumValueHeads: 4}}
	c.Layers = make([]modelconfig.Layer, 4)
	for l := range c.Layers {
		c.Layers[l].IsMoE = l > 0
		if l < 2 {
			c.Layers[l].Attention = modelconfig.LinearAttention
		}
	}
	if err := CheckModel(c, 1); err != nil {
		t.Fatal(err)
	}
	if err := CheckModel(c, 2); err != nil {
		t.Fatalf("size 2: %v", err)
	}
	err := CheckModel(c, 8)
	for _, want := range []string{"tensor-parallel size 8", "linear_num_key_heads: 2", "linear_num_value_heads: 4"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("size 8: %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "num_attention_heads") {
		t.Errorf("size 8: %v: 16 heads divide over 8", err)
	}
}

// TestLocalOneRankBadArgs checks that a rank passing a wrong tensor still
// meets the others: every rank fails, none waits forever, and the next
// collective (after the errors are read) works.
func TestLocalOneRankBadArgs(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	g, _ := NewLocal(3)
	xs := []backend.Tensor{alloc(t, be, nil, 2, 2), alloc(t, be, nil, 2, 2), alloc(t, be, nil, 2, 2)}
	i32, _ := be.Alloc(tensor.I32, 2, 2)
	ranks(g, func(r int, c Comm) {
		x := xs[r]
		if r == 2 {
			x = i32
		}
		c.AllReduce(x, 2)
		c.Broadcast(xs[r], 2) // after the failure: every rank still meets
	})
	for r := range 3 {
		if err := g.Comm(r).Err(); err == nil {
			t.Errorf("rank %d: no error", r)
		}
	}
	ranks(g, func(r int, c Comm) { c.AllReduce(xs[r], 2) })
	for r := range 3 {
		if err := g.Comm(r).Err(); err != nil {
			t.Errorf("rank %d after the errors were read: %v", r, err)
		}
	}
}

func TestCPUGroups(t *testing.T) {
	// node k: cores of two threads, c and c+100
	node := func(first, cores int) [][]int {
		var n [][]int
		for c := first; c < first+cores; c++ {
			n = append(n, []int{c, c + 100})
		}
		return n
	}
	for _, c := range []struct {
		name  string
		nodes [][][]int
		size  int
		want  string
	}{
		{"one node: not pinned", [][][]int{node(0, 4)}, 2, "[]"},
		{"no NUMA information: not pinned", nil, 2, "[]"},
		{"one rank: not pinned", [][][]int{node(0, 2), node(2, 2)}, 1, "[]"},
		{"a node per rank", [][][]int{node(0, 2), node(2, 2)}, 2, "[[0 1 100 101] [2 3 102 103]]"},
		{"two nodes per rank", [][][]int{node(0, 1), node(1, 1), node(2, 1), node(3, 1)}, 2, "[[0 1 100 101] [2 3 102 103]]"},
		{"two ranks per node, whole cores", [][][]int{node(0, 2), node(2, 2)}, 4, "[[0 100] [1 101] [2 102] [3 103]]"},
		{"uneven: 3 ranks on 2 nodes", [][][]int{node(0, 3), node(3, 3)}, 3, "[[0 1 100 101] [2 102] [3 4 5 103 104 105]]"},
		{"uneven: 3 nodes for 2 ranks", [][][]int{node(0, 1), node(1, 1), node(2, 1)}, 2, "[[0 1 100 101] [2 102]]"},
		{"fewer cores than ranks on a node", [][][]int{node(0, 1), node(1, 1)}, 4, "[[0 100] [0 100] [1 101] [1 101]]"},
	} {
		if got := fmt.Sprint(CPUGroups(c.nodes, c.size)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
