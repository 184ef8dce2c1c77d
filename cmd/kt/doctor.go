package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/doctor"
	"github.com/ktserve/kt/sysinfo"
)

func init() { addCommand(newDoctorCmd) }

// errChecksFailed makes kt doctor exit non-zero after printing its report.
var errChecksFailed = errors.New("doctor: some checks failed")

func newDoctorCmd() *cobra.Command {
	var modelPath string
	var asJSON, measure bool
	var tpSize int
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine (and optionally a model directory) for serving with kt",
		Long: `kt doctor reports the CPU (model, instruction sets, AMX permission, cores,
NUMA nodes), memory (RAM, cgroup limit, transparent huge pages) and GPUs, each
as a pass/warn/fail line with a hint. With --model-path it also checks the
model directory: config.json, every tensor the config implies, disk space and
whether the routed experts fit in RAM, and the tensor-parallel sizes it
splits over (with --tensor-parallel-size N: what each of N ranks holds, or
why it does not split; on the GPU, whether there are N GPUs, NCCL and peer
access between them). With --measure it also measures the
memory read bandwidth (the bound of CPU decode), the AMX tile rate (the bound
of the AMX prefill) and, with --model-path, the decode rate the bandwidth
allows for the model's routed experts in each CPU format (a few seconds).
Last it lists every environment variable kt reads, with its type, default,
value now and meaning. It exits with status 1 if any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tpSize < 1 {
				return fmt.Errorf("--tensor-parallel-size %d: want at least 1", tpSize)
			}
			env := &doctor.Env{Sys: sysinfo.Detect(), ModelPath: modelPath, Measure: measure, TPSize: tpSize}
			results := doctor.Run(env, doctor.Checks())
			w := cmd.OutOrStdout()
			var err error
			if asJSON {
				err = doctor.WriteJSON(w, results)
			} else {
				err = doctor.WriteText(w, results)
			}
			if err != nil {
				return err
			}
			if doctor.Worst(results) == doctor.Fail {
				return errChecksFailed
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&modelPath, "model-path", "", "also check this model directory (config.json + safetensors)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	registerTP(cmd.Flags(), &tpSize, "with --model-path, whether the model splits over this many ranks; on the GPU, whether there are that many GPUs, NCCL and peer access")
	cmd.Flags().BoolVar(&measure, "measure", false, "also measure memory read bandwidth, the AMX tile rate and (with --model-path) the decode bound")
	return cmd
}
