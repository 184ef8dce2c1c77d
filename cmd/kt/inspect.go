package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/sysinfo"
)

func init() { addCommand(newInspectCmd) }

func newInspectCmd() *cobra.Command {
	var modelPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect --model-path DIR",
		Short: "Load a model directory and describe it: layers, experts, sizes, whether it fits",
		Long: `kt inspect reads config.json, generation_config.json and the safetensors
weights of a Hugging Face model directory, checks that every tensor the config
implies is present with the right shape, and describes the model: which layers
are MoE or dense and full or linear attention, expert counts, parameter and
routed-expert bytes, and whether the routed experts fit in this machine's RAM.
It exits with status 1 if the directory does not load or fails the check.
For an MoE architecture kt does not serve yet (GLM, MiniMax, Mixtral)
it describes the routed experts alone: their layers in the checkpoint, their
size per CPU expert method and the bytes a decoded token reads, and exits
with status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if modelPath == "" {
				return fmt.Errorf("inspect: --model-path is required")
			}
			c, err := modelconfig.Load(modelPath)
			if err != nil {
				// an MoE architecture kt does not serve: its routed experts at least
				if _, merr := modelconfig.LoadMoEShape(modelPath); merr == nil {
					return inspectMoEOnly(cmd.OutOrStdout(), modelPath, err, sysinfo.Detect().Memory.EffectiveMemory(), asJSON)
				}
				return err
			}
			g, _, err := modelconfig.LoadGeneration(modelPath)
			if err != nil {
				return err
			}
			ck, err := safetensors.OpenDir(modelPath)
			if err != nil {
				return err
			}
			defer ck.Close()
			r := modelconfig.Check(c, ck)
			// What kt serve's model definitions refuse (a rope scaling, an
			// activation), so "ok" here means it serves.
			serveErr := runbase.Supported(c, c.Family)
			mem := sysinfo.Detect().Memory
			avail := mem.EffectiveMemory()
			fits := avail > 0 && r.RoutedExpertBytes <= avail*8/10
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{
					"model_path": modelPath, "config": c, "generation": g, "check": r,
					"ram_available": avail, "routed_experts_fit_in_ram": fits, "serving_error": errString(serveErr),
				}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "%-16s %s\n", "model", modelPath)
				if err := modelconfig.Describe(w, c, g, r); err != nil {
					return err
				}
				verdict := "fit"
				if !fits {
					verdict = "do NOT fit (kt quant to INT8/INT4, or more RAM)"
				}
				fmt.Fprintf(w, "%-16s routed experts %s in %.1f GiB available (80%% rule)\n", "RAM", verdict, float64(avail)/(1<<30))
				if serveErr != nil {
					fmt.Fprintf(w, "%-16s refused: %s\n", "serving", strings.ReplaceAll(serveErr.Error(), "\n", "; "))
				}
			}
			return errors.Join(r.Err(), serveErr)
		},
	}
	cmd.Flags().StringVar(&modelPath, "model-path", "", "model directory (config.json + *.safetensors)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the description as JSON")
	return cmd
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
