package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/adapter/ktconvert"
)

func init() { addCommand(newConvertAdapterCmd) }

func newConvertAdapterCmd() *cobra.Command {
	var (
		o        ktconvert.Options
		alpha    float64
		progress bool
	)
	cmd := &cobra.Command{
		Use:   "convert-adapter IN OUT",
		Short: "Convert KT SFT output to one merged PEFT adapter for --lora-paths",
		Long: `convert-adapter converts the output directory of KTransformers SFT training
(adapter_model.safetensors with the non-expert LoRA, fused_expert_lora.safetensors
with the routed experts' LoRA as [E, ., .] stacks, adapter_config.json) into one
merged PEFT adapter directory (adapter_model.safetensors + adapter_config.json),
as KTransformers' convert_kt_to_sglang_adapter.py does. Pass OUT to
"kt serve --lora-paths NAME=OUT" (or SGLang-KT's --lora-paths); the server splits
expert and non-expert LoRA itself.

When --base-model-name-or-path is a local directory, its config.json is checked
against the adapter (layers, expert count, hidden and intermediate sizes) and
every mismatch is listed. Outputs appear atomically: a failed or interrupted run
leaves no partial OUT, and an existing OUT replaced with --overwrite survives a
failure unchanged.

Every output directory gets a .kt-convert-adapter marker file. --overwrite
replaces only a directory holding that marker (an earlier convert-adapter
output); a non-empty directory without it is refused, and so is an output
that is or contains the working directory, IN, or a local base model
directory (symbolic links resolved).`,
		Example: `  kt convert-adapter saves/KT_FT_qwen35 saves/KT_FT_qwen35_sglang \
      --base-model-name-or-path /models/Qwen3.5-35B-A3B --overwrite`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Input, o.Output = args[0], args[1]
			if cmd.Flags().Changed("lora-alpha") {
				o.LoraAlpha = &alpha
			}
			stderr := cmd.ErrOrStderr()
			o.Warn = func(s string) { fmt.Fprintln(stderr, "warning:", s) }
			var pp *progressPrinter
			if progress {
				pp = newProgressPrinter(stderr)
				o.Progress = pp.update
			}
			ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sum, err := ktconvert.Convert(ctx, o)
			if pp != nil {
				pp.finish()
			}
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("convert-adapter interrupted; nothing was written: %w", err)
				}
				return fmt.Errorf("convert-adapter: %w", err)
			}
			printSummary(cmd.OutOrStdout(), stderr, sum)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.BaseModel, "base-model-name-or-path", "", "base model path or name to write into adapter_config.json; a local directory's config.json is checked against the adapter (required)")
	f.Float64Var(&alpha, "lora-alpha", 0, "LoRA alpha to use when the input has no adapter_config.json with lora_alpha")
	f.BoolVar(&o.Overwrite, "overwrite", false, "replace output directories an earlier convert-adapter run wrote (they hold .kt-convert-adapter)")
	f.StringVar(&o.ExpertOutput, "expert-output-dir", "", "also write the expert-only adapter here (debugging)")
	f.StringVar(&o.NonexpertOutput, "nonexpert-output-dir", "", "also write the non-expert-only adapter here (debugging)")
	f.BoolVar(&progress, "progress", true, "show progress on stderr")
	_ = cmd.MarkFlagRequired("base-model-name-or-path")
	return cmd
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// printSummary prints the reference converter's summary lines on stdout and
// kt's extra facts on stderr.
func printSummary(stdout, stderr io.Writer, s *ktconvert.Summary) {
	fmt.Fprintf(stdout, "Converted KT fused expert LoRA adapter: %d tensors, rank=%d, target_modules=%s\n",
		s.TensorCount, s.Rank, pyList(s.TargetModules))
	for _, w := range s.Outputs[1:] {
		fmt.Fprintf(stdout, "Wrote %s adapter: %d tensors, target_modules=%s, output_dir=%s\n",
			w.Role, w.TensorCount, pyList(w.TargetModules), w.Dir)
	}
	checked := "base model not checked (not a local directory)"
	if s.BaseChecked {
		checked = "matches the base model's config.json"
	}
	fmt.Fprintf(stderr, "%s: %d layers x %d experts, %.1f MiB; %s\n",
		s.Output, len(s.Layers), s.Experts, float64(s.Outputs[0].Bytes)/(1<<20), checked)
}

// pyList formats names as Python prints a list of strings: ['a', 'b'].
func pyList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// progressPrinter shows conversion progress: a self-overwriting line on a
// terminal, a line per 10% otherwise.
type progressPrinter struct {
	w        io.Writer
	tty      bool
	last     time.Time
	lastTen  int64
	shown    bool
	lastLine string
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressPrinter{w: w, tty: tty, lastTen: -1}
}

func (p *progressPrinter) update(pr ktconvert.Progress) {
	pct := int64(100)
	if pr.TotalBytes > 0 {
		pct = pr.DoneBytes * 100 / pr.TotalBytes
	}
	line := fmt.Sprintf("writing %s: %d/%d tensors, %.1f/%.1f MiB (%d%%)", pr.Output, pr.DoneTensors, pr.TotalTensors,
		float64(pr.DoneBytes)/(1<<20), float64(pr.TotalBytes)/(1<<20), pct)
	if p.tty {
		now := time.Now()
		if now.Sub(p.last) < 100*time.Millisecond && pr.DoneTensors != pr.TotalTensors {
			return
		}
		p.last = now
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if ten := pct / 10; ten != p.lastTen {
		p.lastTen = ten
		fmt.Fprintln(p.w, line)
	}
}

func (p *progressPrinter) finish() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
	}
}
