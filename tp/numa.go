package tp

// CPUGroups assigns a machine's CPUs to size CPU ranks, one thread group
// per NUMA node where there are several: nodes[k] lists node k's cores,
// each core its hardware threads. With fewer than two nodes (or one rank)
// it returns nil: the ranks are not pinned. With at least as many nodes as
// ranks, each rank gets whole nodes (node k to rank k·size/len(nodes));
// else the ranks are spread evenly over the nodes (rank r on node
// r·len(nodes)/size) and the ranks of one node share its cores out, whole
// cores in order (a node with fewer cores than ranks gives them in turn).
// A rank's CPUs list the first thread of each of its cores, then the
// others, so that a rank with fewer threads than CPUs runs one per core.
func CPUGroups(nodes [][][]int, size int) [][]int {
	if len(nodes) < 2 || size < 2 {
		return nil
	}
	cores := make([][][]int, size) // per rank
	if len(nodes) >= size {
		for k, n := range nodes {
			r := k * size / len(nodes)
			cores[r] = append(cores[r], n...)
		}
	} else {
		onNode := make([][]int, len(nodes)) // the ranks of each node
		for r := range size {
			k := r * len(nodes) / size
			onNode[k] = append(onNode[k], r)
		}
		for k, ranks := range onNode {
			n, m := nodes[k], len(ranks)
			for i, r := range ranks {
				if len(n) < m {
					cores[r] = [][]int{n[i%len(n)]}
					continue
				}
				s := Layout{Rank: i, Size: m}.share(len(n))
				cores[r] = n[s.First : s.First+s.Count]
			}
		}
	}
	out := make([][]int, size)
	for r, cs := range cores {
		for _, c := range cs {
			out[r] = append(out[r], c[0])
		}
		for _, c := range cs {
			out[r] = append(out[r], c[1:]...)
		}
	}
	return out
}

// share is this rank's share of n units, the first n%Size ranks one more
// (Split for n that need not divide).
func (l Layout) share(n int) Span {
	per, extra := n/l.Size, n%l.Size
	return Span{First: l.Rank*per + min(l.Rank, extra), Count: per + btoi(l.Rank < extra)}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
