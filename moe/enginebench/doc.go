// Package enginebench is the harness of kt bench --type moe: the named
// layer shapes it benches, synthetic layers of them, the timing loop over
// random batches (Bench) and the PyTorch baseline script. The probes it
// compares against (cpuexperts.ReadProbe, cpuexperts.TileProbe) stay in the
// engine package, as they run its C kernels; so does the decode-task trace
// table (cpuexperts.TaskTrace.Row), which the hybrid step prints too.
package enginebench
