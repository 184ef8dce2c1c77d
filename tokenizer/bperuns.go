package tokenizer

import "math"

// symRun is count adjacent copies of one symbol.
type symRun struct {
	sym   int32
	count int
}

// maxRuns bounds the run-length form: each merge step scans every run, so
// words of many short runs go to the heap instead.
const maxRuns = 256

// mergeRuns is mergeHeap for words made of long runs of one byte (a run of
// spaces, newlines or one letter is a single pre-tokenized word): the word
// is held as runs of equal symbols, and a merge of two equal symbols is
// applied to a whole run at once — its pairs merge left to right, as the
// heap pops them, since every pair the merge creates ranks after it. The
// cost grows with the number of runs and merge stages, not with the word's
// length. ok is false, and dst unchanged, when the word has too many runs
// or the merges break that ordering (a vocabulary whose merges are not in
// creation order); the caller then uses the heap.
func (m *bpe) mergeRuns(dst []int32, w string) (out []int32, ok bool) {
	runs := make([]symRun, 0, 16)
	for i := 0; i < len(w); i++ {
		s := m.byteIDs[w[i]]
		if n := len(runs); n > 0 && runs[n-1].sym == s {
			runs[n-1].count++
			continue
		}
		if len(runs) == maxRuns {
			return dst, false
		}
		runs = append(runs, symRun{s, 1})
	}
	rank := func(a, b int32) (merge, bool) { return m.merges.get(pairKey(a, b)) }
	for {
		// The lowest-ranked pair; a rank names one pair, so ties are
		// between copies of the same pair, and the leftmost wins.
		best, within, bm := -1, false, merge{rank: math.MaxInt32}
		for i, r := range runs {
			if r.count >= 2 {
				if mg, ok := rank(r.sym, r.sym); ok && mg.rank < bm.rank {
					best, within, bm = i, true, mg
				}
			}
			if i+1 < len(runs) {
				if mg, ok := rank(r.sym, runs[i+1].sym); ok && mg.rank < bm.rank {
					best, within, bm = i, false, mg
				}
			}
		}
		if best < 0 {
			break
		}
		if within {
			r := runs[best]
			// The pairs the run's merges create must rank after this
			// merge, or the heap would pop one of them in between.
			later := func(a, b int32) bool { mg, ok := rank(a, b); return !ok || mg.rank > bm.rank }
			if (best > 0 && !later(runs[best-1].sym, bm.id)) || !later(bm.id, bm.id) ||
				(r.count%2 == 1 && !later(bm.id, r.sym)) ||
				(r.count%2 == 0 && best+1 < len(runs) && !later(bm.id, runs[best+1].sym)) {
				return dst, false
			}
			repl := []symRun{{bm.id, r.count / 2}}
			if r.count%2 == 1 {
				repl = append(repl, symRun{r.sym, 1})
			}
			runs = splice(runs, best, best+1, repl)
		} else {
			a, b := runs[best], runs[best+1]
			var repl []symRun
			if a.count > 1 {
				repl = append(repl, symRun{a.sym, a.count - 1})
			}
			repl = append(repl, symRun{bm.id, 1})
			if b.count > 1 {
				repl = append(repl, symRun{b.sym, b.count - 1})
			}
			runs = splice(runs, best, best+2, repl)
		}
		if runs = joinRuns(runs); len(runs) > maxRuns {
			return dst, false
		}
	}
	for _, r := range runs {
		for range r.count {
			dst = append(dst, r.sym)
		}
	}
	return dst, true
}

// splice replaces runs[i:j] by repl.
func splice(runs []symRun, i, j int, repl []symRun) []symRun {
	out := make([]symRun, 0, len(runs)-(j-i)+len(repl))
	out = append(out, runs[:i]...)
	out = append(out, repl...)
	return append(out, runs[j:]...)
}

// joinRuns merges adjacent runs of the same symbol.
func joinRuns(runs []symRun) []symRun {
	out := runs[:1]
	for _, r := range runs[1:] {
		if last := &out[len(out)-1]; last.sym == r.sym {
			last.count += r.count
		} else {
			out = append(out, r)
		}
	}
	return out
}
