//go:build linux && amd64 && cgo

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/moe/ktformat"
	"github.com/ktserve/kt/safetensors"
)

func init() { addCommand(newQuantCmd) }

type quantOpts struct {
	output  string
	method  string
	pools   int
	noProg  bool
	srcKind string
	layout  string
}

func newQuantCmd() *cobra.Command {
	var o quantOpts
	cmd := &cobra.Command{
		Use:   "quant MODEL_DIR --output DIR --method int8|int4",
		Short: "Convert a model's routed experts (HF bf16 or fp8) to INT8/INT4 for the CPU expert engine",
		Long: `kt quant converts the routed experts of a Hugging Face checkpoint (bf16, or fp8
with 128x128 block scales) to the CPU formats AMXINT8 (--method int8) or AMXINT4
(--method int4), split into --threadpool-count slices of the intermediate
dimension, in KTransformers' key layout (any MoE architecture whose checkpoint
keeps one tensor per expert: Qwen3-MoE, Qwen3-Next, Qwen3.5, DeepSeek V2/V3,
Kimi K2, GLM-4.5 as mlp.experts.{E}.{gate,up,down}_proj, Mixtral and MiniMax as
block_sparse_moe.experts.{E}.w1/w3/w2 — or the fused stacks transformers 5
saves, mlp.experts.gate_up_proj and down_proj; the shape comes from
config.json):

  blk.{L}.ffn_{gate|up|down}_exps.{E}.numa.{N}.{weight|scale}

One safetensors shard per MoE layer is written atomically; an interrupted run
resumes where it stopped; kt_quant.json is written last. Serve with the same
--kt-threadpool-count: the loader refuses a different one.

--layout rows (the default) stores plain row-major int8/int4 that kt repacks at
load. --layout kt stores KTransformers' own bytes (the AMX BufferB image of its
newest release, as an int8 1-D tensor, with KT's quantization rules): for the
same weights they equal what KT's convert_cpu_weights.py writes, so KTransformers
can load the output too. kt serve reads both, and KTransformers' own converted
directories as well.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runQuant(args[0], o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output directory (required)")
	f.StringVar(&o.method, "method", "int8", "int8 (AMXINT8) or int4 (AMXINT4)")
	f.IntVar(&o.pools, "threadpool-count", 1, "thread pools (NUMA nodes) the weights are split for; must match --kt-threadpool-count")
	f.BoolVar(&o.noProg, "no-progress", false, "no progress bar")
	f.StringVar(&o.layout, "layout", ktformat.LayoutRows, "rows (kt's row-major) or kt (KTransformers' own AMX layout, readable by KTransformers)")
	return cmd
}

func runQuant(model string, o quantOpts, out, errw io.Writer) error {
	if o.output == "" {
		return errors.New("--output is required")
	}
	var m cpuexperts.Method
	switch strings.ToLower(o.method) {
	case "int8", "amxint8":
		m = cpuexperts.AMXINT8
	case "int4", "amxint4":
		m = cpuexperts.AMXINT4
	default:
		return fmt.Errorf("--method %q: want int8 or int4", o.method)
	}
	layout := ktformat.LayoutRows
	switch strings.ToLower(o.layout) {
	case "", "rows":
	case "kt", "ktransformers":
		layout = ktformat.LayoutKT
	default:
		return fmt.Errorf("--layout %q: want rows or kt", o.layout)
	}
	if o.pools < 1 || o.pools > 8 {
		return fmt.Errorf("--threadpool-count %d outside 1..8", o.pools)
	}
	shape, err := modelconfig.LoadMoEShape(model)
	if err != nil {
		return err
	}
	ckpt, err := safetensors.OpenDir(model)
	if err != nil {
		return err
	}
	defer ckpt.Close()
	mm, err := expertsource.FindMoEModel(model, shape, ckpt.Names(), func(n string) []int64 {
		ti, _ := ckpt.Info(n)
		return ti.Shape
	})
	if err != nil {
		return err
	}
	et, layers := mm.Tensors, mm.Layers
	if len(et.Others) > 0 {
		fmt.Fprintf(errw, "kt quant: converting the experts of %d layers under %q; left out: %s\n", len(et.Layers), et.Prefix, strings.Join(et.Others, ", "))
	}
	if len(mm.Beyond) > 0 {
		fmt.Fprintf(errw, "kt quant: layers %v are past num_hidden_layers %d (a multi-token prediction module): left out\n", mm.Beyond, shape.Layers)
	}
	if err := cpuexperts.CheckShape(m, shape.Hidden, shape.Intermediate, o.pools); err != nil {
		return fmt.Errorf("%s: %s cannot hold this model's experts: %w", model, m, err)
	}
	spec := cpuexperts.LayerSpec{Method: m, Experts: shape.Experts, Hidden: shape.Hidden, Intermediate: shape.Intermediate}
	if err := os.MkdirAll(o.output, 0o755); err != nil {
		return err
	}
	if abs1, _ := filepath.Abs(o.output); abs1 != "" {
		if abs2, _ := filepath.Abs(model); abs1 == abs2 {
			return errors.New("--output must differ from the model directory")
		}
	}
	// a finished conversion for other settings is refused, not overwritten
	if b, err := os.ReadFile(filepath.Join(o.output, ktformat.QuantManifestName)); err == nil && len(b) > 0 {
		if qd, err := ktformat.OpenQuantDir(o.output); err == nil {
			mm := qd.Manifest
			qd.Close()
			have := mm.Layout
			if have == "" {
				have = ktformat.LayoutRows
			}
			if mm.Method != m || mm.ThreadpoolCnt != o.pools || have != layout {
				return fmt.Errorf("%s already holds %s for %d thread pools in layout %s; choose another --output", o.output, mm.Method, mm.ThreadpoolCnt, have)
			}
		}
	}
	perLayer := int64(shape.Experts) * 3 * int64(shape.Hidden) * int64(shape.Intermediate) * 2
	bar := newProgress(errw, int64(len(layers))*perLayer, !o.noProg)
	srcType := ""
	for i, l := range layers {
		path := filepath.Join(o.output, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(layers)))
		done, err := ktformat.CheckQuantShardLayout(path, m, o.pools, l, layout)
		if err != nil {
			return err
		}
		if srcType == "" {
			if t, ok := ckpt.Info(et.Naming.Name(et.Prefix, l, 0, cpuexperts.Gate)); ok {
				srcType = t.DType.String()
			}
		}
		base := int64(i) * perLayer
		if done {
			bar.set(base+perLayer, fmt.Sprintf("layer %d/%d (done before)", i+1, len(layers)))
			continue
		}
		src := &expertsource.CheckpointSource{Ckpt: ckpt, Prefix: et.Prefix, Layer: l, Naming: et.Naming, Int4Group: shape.Int4Group}
		quantize := ktformat.QuantizeLayer
		if layout == ktformat.LayoutKT {
			quantize = ktformat.QuantizeLayerKT
		}
		err = quantize(src, spec, o.pools, l, path, func(d int64) {
			bar.set(base+d, fmt.Sprintf("layer %d/%d", i+1, len(layers)))
		})
		if err != nil {
			bar.finish()
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	bar.finish()
	man := ktformat.QuantManifest{Method: m, Bits: map[cpuexperts.Method]int{cpuexperts.AMXINT8: 8, cpuexperts.AMXINT4: 4}[m],
		ThreadpoolCnt: o.pools, Experts: shape.Experts, Hidden: shape.Hidden, Intermediate: shape.Intermediate,
		Layers: layers, Source: model, SourceDType: srcType, ShardsPerLayer: "one file per MoE layer", Layout: layout}
	if err := ktformat.WriteQuantManifest(o.output, man); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d layers of %s experts (%d pools, layout %s) to %s\n", len(layers), m, o.pools, layout, o.output)
	return nil
}

// progress is a one-line progress bar on a terminal-ish writer.
type progress struct {
	w       io.Writer
	total   int64
	start   time.Time
	last    time.Time
	enabled bool
	drawn   bool
}

func newProgress(w io.Writer, total int64, enabled bool) *progress {
	return &progress{w: w, total: total, start: time.Now(), enabled: enabled}
}

func (p *progress) set(done int64, label string) {
	if !p.enabled || time.Since(p.last) < 100*time.Millisecond && done < p.total {
		return
	}
	p.last = time.Now()
	frac := float64(done) / float64(max(p.total, 1))
	const width = 30
	n := int(frac * width)
	el := time.Since(p.start).Seconds()
	eta := "?"
	if frac > 0 && el > 0 {
		eta = (time.Duration((el/frac - el) * float64(time.Second))).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r[%s%s] %5.1f%% %-28s %6.2f GB/s  ETA %s   ", strings.Repeat("#", n), strings.Repeat(".", width-n),
		100*frac, label, float64(done)/1e9/max(el, 1e-9), eta)
	p.drawn = true
}

func (p *progress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
