package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// runWords builds words of long runs of one piece each (spaces, newlines,
// tabs, letters, a multi-byte character) of random lengths.
func runWords(seed uint64, count int) []string {
	r := rand.New(rand.NewPCG(seed, 7))
	pieces := []string{" ", "\n", "\t", "a", "x", "=", "-", "0", "中", "\r\n", " \n"}
	var words []string
	for range count {
		var b strings.Builder
		for range 1 + r.IntN(6) {
			p := pieces[r.IntN(len(pieces))]
			b.WriteString(strings.Repeat(p, 1+r.IntN(700)))
		}
		words = append(words, b.String())
	}
	return words
}

// TestMergeRunsAgreesWithHeap runs the run-length and the heap BPE on the
// same run-heavy words with both bundled vocabularies.
func TestMergeRunsAgreesWithHeap(t *testing.T) {
	for name, tok := range map[string]*Tokenizer{"qwen3": qwen3(t), "qwen35": qwen35(t)} {
		words := runWords(5, 300)
		for _, n := range []int{2, 3, 255, 256, 257, 1000, 4095, 4096, 65537} {
			words = append(words, strings.Repeat(" ", n), strings.Repeat("\n", n), strings.Repeat("a", n))
		}
		for _, w := range words {
			runs, ok := tok.model.mergeRuns(nil, w)
			if !ok {
				if byteRuns(w) <= maxRuns/4 {
					t.Errorf("%s: %q (%d runs of a byte) fell back to the heap", name, w[:min(len(w), 40)], byteRuns(w))
				}
				continue
			}
			if heap := tok.model.mergeHeap(nil, w); !slices.Equal(runs, heap) {
				t.Fatalf("%s: %q (%d bytes): runs %v, heap %v", name, w[:min(len(w), 40)], len(w), runs, heap)
			}
		}
	}
}

// byteRuns counts the runs of equal bytes in w.
func byteRuns(w string) int {
	n := 1
	for i := 1; i < len(w); i++ {
		if w[i] != w[i-1] {
			n++
		}
	}
	return n
}

// FuzzMergeRuns checks the run-length BPE against the heap on words made
// of runs of the fuzzed pieces.
func FuzzMergeRuns(f *testing.F) {
	tok := qwen3(f)
	f.Add(" ", "\n", uint16(300), uint16(5))
	f.Add("ab", "中", uint16(17), uint16(400))
	f.Fuzz(func(t *testing.T, a, b string, na, nb uint16) {
		w := strings.Repeat(a, int(na)%2000) + strings.Repeat(b, int(nb)%2000)
		if len(w) < 2 {
			return
		}
		runs, ok := tok.model.mergeRuns(nil, w)
		if !ok {
			return
		}
		if heap := tok.model.mergeHeap(nil, w); !slices.Equal(runs, heap) {
			t.Fatalf("%q: runs %v, heap %v", w, runs, heap)
		}
	})
}

// BenchmarkEncodeWhitespace encodes 1 MB runs of one byte, each a single
// pre-tokenized word; MB/s beside BenchmarkEncode's mixed text.
func BenchmarkEncodeWhitespace(b *testing.B) {
	tok := qwen3(b)
	for _, c := range []struct{ name, piece string }{{"spaces", " "}, {"newlines", "\n"}, {"letters", "a"}, {"space-newline", " \n"}} {
		text := strings.Repeat(c.piece, (1<<20)/len(c.piece))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			start := cpuTime()
			for b.Loop() {
				tok.Encode(text)
			}
			reportCPU(b, len(text), start)
		})
	}
}
