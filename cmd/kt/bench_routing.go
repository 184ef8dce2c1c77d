package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/generate"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertdist"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/moe/routingstats"
	"github.com/ktserve/kt/perplexity"
	"github.com/ktserve/kt/tokenizer"
)

// routingBenchOpts are kt bench --type routing's own flags; --model-path
// and --json are shared with --type moe (defined here in a build without
// it).
type routingBenchOpts struct {
	data, calib, tokenizerPath string
	ctx, threads, tpSize       int
}

var routingOpts routingBenchOpts

// routingRatios are the GPU expert ratios the table covers.
var routingRatios = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}

func init() {
	addBenchType("routing", benchType{
		short: "a model's expert routing on a text (--model-path, --data, --calib): per-layer skew, share of picks on GPU experts per placement strategy and ratio",
		flags: func(cmd *cobra.Command) {
			f := cmd.Flags()
			if fl := f.Lookup("model-path"); fl != nil {
				fl.Usage += "; routing: the checkpoint directory"
			} else {
				f.StringArray("model-path", nil, "routing: the checkpoint directory")
			}
			if fl := f.Lookup("json"); fl != nil {
				fl.Usage += " (moe, routing; routing takes - for stdout)"
			} else {
				f.String("json", "", "routing: also write results as JSON to this file (- = stdout)")
			}
			o := &routingOpts
			f.StringVar(&o.data, "data", "", "routing: UTF-8 text whose routing is measured")
			f.StringVar(&o.calib, "calib", "", "routing: a different text whose counts place the frequency strategy's GPU experts (without it, frequency is skipped)")
			f.StringVar(&o.tokenizerPath, "tokenizer-path", "", "routing: directory with tokenizer.json or tiktoken.model (default: --model-path)")
			f.IntVar(&o.ctx, "ctx", 512, "routing: window in tokens; windows do not overlap")
			f.IntVar(&o.threads, "threads", 0, "routing: CPU threads (0 = all cores)")
			registerTP(f, &o.tpSize, "routing: CPU ranks the model is split over (tensor parallelism; the routing is the same)")
		},
		run: func(cmd *cobra.Command, out io.Writer) error {
			paths, err := cmd.Flags().GetStringArray("model-path")
			if err != nil {
				return err
			}
			jsonPath, err := cmd.Flags().GetString("json")
			if err != nil {
				return err
			}
			if len(paths) != 1 {
				return fmt.Errorf("bench routing: give one --model-path (%d given)", len(paths))
			}
			res, err := runRoutingBench(paths[0], routingOpts, cmd.ErrOrStderr())
			if err != nil {
				return fmt.Errorf("bench routing: %w", err)
			}
			printRouting(out, res)
			if jsonPath == "" {
				return nil
			}
			b, err := json.MarshalIndent(res, "", " ")
			if err != nil {
				return err
			}
			if jsonPath == "-" {
				_, err = out.Write(append(b, '\n'))
				return err
			}
			if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
				return fmt.Errorf("bench routing: write %s: %w", jsonPath, err)
			}
			return nil
		},
	})
}

// routingResult is what kt bench --type routing measures.
type routingResult struct {
	Model       string  `json:"model"`
	Data        string  `json:"data"`
	Calib       string  `json:"calib,omitempty"`
	Tokens      int     `json:"tokens"`
	Windows     int     `json:"windows"`
	Ctx         int     `json:"ctx"`
	CalibTokens int     `json:"calib_tokens,omitempty"`
	Experts     int     `json:"experts"`
	TopK        int     `json:"top_k"`
	Seconds     float64 `json:"seconds"`
	// Layers is the skew of each MoE layer's picks over the whole text.
	Layers []routingLayer `json:"layers"`
	// Ratios are the GPU expert ratios of each Strategies row.
	Ratios     []float64         `json:"ratios"`
	Strategies []routingStrategy `json:"strategies"`
	// Skipped says which strategies were not measured and why.
	Skipped []string `json:"skipped,omitempty"`
}

type routingLayer struct {
	Layer int `json:"layer"`
	routingstats.Skew
}

// routingStrategy is one row of the table: per ratio, the share of the
// text's routed picks that land on GPU experts.
type routingStrategy struct {
	Name  string    `json:"name"`
	Share []float64 `json:"share"`
}

// runRoutingBench loads the model on the CPU, records the routing of
// o.data (and o.calib) window by window and computes the result.
func runRoutingBench(dir string, o routingBenchOpts, log io.Writer) (*routingResult, error) {
	if o.data == "" {
		return nil, errors.New("--data is required")
	}
	if o.ctx < 2 {
		return nil, errors.New("--ctx must be at least 2")
	}
	cfg, err := modelconfig.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("model directory: %w", err)
	}
	if cfg.NumExperts == 0 || cfg.NumMoELayers() == 0 {
		return nil, fmt.Errorf("%s has no routed experts", dir)
	}
	moe := make([]bool, len(cfg.Layers))
	for l, L := range cfg.Layers {
		moe[l] = L.IsMoE
	}
	tokDir := o.tokenizerPath
	if tokDir == "" {
		tokDir = dir
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return nil, fmt.Errorf("the model's tokenizer (%s; or give --tokenizer-path): %w", tokDir, err)
	}
	ids, err := encodeFile(tok, o.data, "--data")
	if err != nil {
		return nil, err
	}
	var calibIDs []int32
	if o.calib != "" {
		if calibIDs, err = encodeFile(tok, o.calib, "--calib"); err != nil {
			return nil, err
		}
	}
	ctx := min(o.ctx, max(len(ids), len(calibIDs)))
	rec, err := routingstats.NewRecorder(len(cfg.Layers), cfg.NumExperts)
	if err != nil {
		return nil, err
	}
	var dist *expertdist.Recorder
	if o.calib != "" {
		// the frequency strategy's counts, dumped and read back as kt
		// serve's --init-expert-location reads them
		tmp, err := os.MkdirTemp("", "kt-routing-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if dist, err = expertdist.New(len(cfg.Layers), cfg.NumExperts, -1, tmp); err != nil {
			return nil, err
		}
	}
	var active arch.ExpertRecorder = rec
	if o.tpSize < 1 {
		return nil, fmt.Errorf("--tensor-parallel-size %d: want at least 1", o.tpSize)
	}
	opts := arch.Options{MaxSeqs: 1, MaxTotalTokens: ctx + 16, MaxBatchTokens: ctx, Threads: o.threads, Device: "cpu", Experts: "auto",
		ExpertRecorder: recorderSwitch{&active}, TensorParallel: o.tpSize}
	r, err := arch.Load(dir, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if p := arch.ExpertPath(r); p != "" {
		fmt.Fprintln(log, "bench routing: routed experts:", p)
	}
	gs, err := generate.NewSession(r, ctx) // a window is one prefill chunk
	if err != nil {
		return nil, err
	}
	defer gs.Close()
	res := &routingResult{Model: dir, Data: o.data, Calib: o.calib, Tokens: len(ids), Ctx: o.ctx, Experts: cfg.NumExperts,
		TopK: cfg.TopK, Ratios: routingRatios}
	t0 := time.Now()
	for _, w := range perplexity.Windows(ids, o.ctx) {
		if err := prefill(gs, w); err != nil {
			return nil, fmt.Errorf("--data window %d: %w", res.Windows, err)
		}
		rec.EndWindow()
		res.Windows++
	}
	if res.Windows == 0 {
		return nil, fmt.Errorf("--data %s: %d tokens, no window of two", o.data, len(ids))
	}
	var statsPath string
	if dist != nil {
		active = dist
		dist.Start()
		for i, w := range perplexity.Windows(calibIDs, o.ctx) {
			if err := prefill(gs, w); err != nil {
				return nil, fmt.Errorf("--calib window %d: %w", i, err)
			}
			dist.EndPass()
		}
		dist.Stop()
		res.CalibTokens = len(calibIDs)
		if statsPath, err = dist.Dump(); err != nil {
			return nil, err
		}
	}
	res.Seconds = time.Since(t0).Seconds()

	ws := rec.Windows()
	sum := routingstats.Sum(ws, len(cfg.Layers), cfg.NumExperts)
	for l, isMoE := range moe {
		if isMoE {
			res.Layers = append(res.Layers, routingLayer{Layer: l, Skew: routingstats.LayerSkew(sum[l])})
		}
	}
	strategies := []placement.Strategy{placement.Uniform, placement.FrontLoading, placement.Random, placement.Frequency}
	for _, s := range strategies {
		if s == placement.Frequency && statsPath == "" {
			res.Skipped = append(res.Skipped, "frequency: no --calib text to record counts on")
			continue
		}
		row := routingStrategy{Name: string(s)}
		for _, ratio := range routingRatios {
			m, _, err := placement.Compute(moe, cfg.NumExperts, placement.Request{Ratio: ratio, RatioSet: true, Strategy: s, StatsPath: statsPath})
			if err != nil {
				return nil, err
			}
			row.Share = append(row.Share, fraction(routingstats.Share(m, sum)))
		}
		res.Strategies = append(res.Strategies, row)
	}
	dyn := routingStrategy{Name: "dynamic update"}
	best := routingStrategy{Name: "best fixed (bound)"}
	for _, ratio := range routingRatios {
		m, n, err := placement.Compute(moe, cfg.NumExperts, placement.Request{Ratio: ratio, RatioSet: true, Strategy: placement.Uniform})
		if err != nil {
			return nil, err
		}
		dyn.Share = append(dyn.Share, fraction(routingstats.Dynamic(m, ws)))
		best.Share = append(best.Share, fraction(routingstats.Share(routingstats.Best(moe, sum, n), sum)))
	}
	res.Strategies = append(res.Strategies, dyn, best)
	return res, nil
}

// recorderSwitch forwards the model's picks to the recorder *cur points
// at, so one loaded model records the data text and then the calibration
// text into different recorders.
type recorderSwitch struct{ cur *arch.ExpertRecorder }

func (s recorderSwitch) Recording() bool            { return (*s.cur).Recording() }
func (s recorderSwitch) Add(layer int, ids []int32) { (*s.cur).Add(layer, ids) }

// prefill runs one window from an empty context (its first output token
// only: every pick recorded is a prefill pick).
func prefill(gs *generate.Session, w []int32) error {
	_, err := gs.Run(w, generate.Params{})
	return err
}

// encodeFile tokenizes a text file as one string.
func encodeFile(tok *tokenizer.Tokenizer, path, flag string) ([]int32, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return tok.Encode(string(text)), nil
}

func fraction(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// printRouting prints the per-layer skew and the strategy table.
func printRouting(w io.Writer, r *routingResult) {
	fmt.Fprintf(w, "model %s: %d experts per MoE layer, top-%d\n", r.Model, r.Experts, r.TopK)
	fmt.Fprintf(w, "data %s: %d tokens in %d windows of up to %d (prefill picks)\n", r.Data, r.Tokens, r.Windows, r.Ctx)
	if r.Calib != "" {
		fmt.Fprintf(w, "calib %s: %d tokens\n", r.Calib, r.CalibTokens)
	}
	fmt.Fprintf(w, "time %.1fs\n\n", r.Seconds)
	if len(r.Layers) > 0 {
		l0 := r.Layers[0]
		fmt.Fprintf(w, "%-6s %10s %14s %14s %10s %7s\n", "layer", "picks", fmt.Sprintf("top %d (10%%)", l0.Top10N), fmt.Sprintf("top %d (25%%)", l0.Top25N), "entropy", "unused")
		for _, l := range r.Layers {
			fmt.Fprintf(w, "%-6d %10d %13.1f%% %13.1f%% %10.3f %7d\n", l.Layer, l.Picks, 100*l.Top10, 100*l.Top25, l.Entropy, l.Unused)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "share of routed picks on GPU experts, by GPU expert ratio\n%-20s", "strategy")
	for _, x := range r.Ratios {
		fmt.Fprintf(w, " %5.0f%%", 100*x)
	}
	fmt.Fprintln(w)
	for _, s := range r.Strategies {
		fmt.Fprintf(w, "%-20s", s.Name)
		for _, v := range s.Share {
			fmt.Fprintf(w, " %5.1f%%", 100*v)
		}
		fmt.Fprintln(w)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w, "skipped:", strings.Join(r.Skipped, "; "))
	}
}
