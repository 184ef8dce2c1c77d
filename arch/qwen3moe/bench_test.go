package qwen3moe

import (
	"testing"
	"time"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/model"
)

// BenchmarkDecodeSynthetic measures batch-1 decode on the checkpoint in
// $KT_SYNTH_DIR (see TestMakeSynthetic) next to a streaming-read bandwidth
// probe run in the same benchmark: tok/s, weight GB/s (decode weight bytes
// x tok/s), stream GB/s and their ratio (fraction of the bandwidth bound).
func BenchmarkDecodeSynthetic(b *testing.B) {
	dir := settings.SynthDir.Get()
	if dir == "" {
		b.Skip("set KT_SYNTH_DIR to a checkpoint (e.g. one written by TestMakeSynthetic)")
	}
	for _, mode := range []string{"backend", "auto"} {
		b.Run("experts="+mode, func(b *testing.B) { benchDecode(b, dir, mode) })
	}
}

func benchDecode(b *testing.B, dir, experts string) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 4096, MaxBatchTokens: 64, Backend: be, Experts: experts})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.Log(r.ExpertPath())
	// bandwidth probe: best of 3 sums over 1 GiB
	buf := make([]float32, 1<<28)
	for i := range buf {
		buf[i] = 1
	}
	var stream float64
	for range 5 {
		t0 := time.Now()
		be.StreamRead(buf)
		stream = max(stream, float64(len(buf)*4)/time.Since(t0).Seconds()/1e9)
	}
	buf = nil
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if err := r.Reserve(0, len(prompt)); err != nil {
		b.Fatal(err)
	}
	var out model.Logits
	if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: prompt}}}, &out); err != nil {
		b.Fatal(err)
	}
	pos, tok := len(prompt), int32(17)
	b.ResetTimer()
	for range b.N {
		if pos+1 >= 4096 {
			b.StopTimer()
			r.Free(0)
			pos = 0
			b.StartTimer()
		}
		if err := r.Reserve(0, 1); err != nil {
			b.Fatal(err)
		}
		if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Pos: pos, Tokens: []int32{tok}}}}, &out); err != nil {
			b.Fatal(err)
		}
		pos++
		tok = (tok*31 + 7) % int32(r.cfg.VocabSize)
	}
	tps := float64(b.N) / b.Elapsed().Seconds()
	gbs := float64(r.DecodeWeightBytes()) * tps / 1e9
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(gbs, "weightGB/s")
	b.ReportMetric(stream, "streamGB/s")
	b.ReportMetric(gbs/stream, "of-bound")
	b.ReportMetric(float64(r.DecodeWeightBytes())/1e6, "MB/tok")
}
