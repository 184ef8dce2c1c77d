package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
)

// moeOnlyReport is what kt inspect says of an MoE model whose architecture
// kt does not serve: its routed experts as config.json and the checkpoint
// state them, their size per CPU expert method, and the bytes one decoded
// token reads of them.
type moeOnlyReport struct {
	ModelPath    string               `json:"model_path"`
	Unsupported  string               `json:"unsupported"` // why kt does not serve it
	Shape        modelconfig.MoEShape `json:"moe_shape"`
	Prefix       string               `json:"expert_prefix"`
	Layers       []int                `json:"moe_layers"`
	Beyond       []int                `json:"layers_past_num_hidden_layers,omitempty"`
	Methods      []moeMethodBytes     `json:"methods"`
	RAMAvailable int64                `json:"ram_available"`
}

// moeMethodBytes is one method's routed-expert bytes: all of them, and per
// decoded token (top-k experts of every MoE layer), and whether all fit in
// 80 % of the available RAM.
type moeMethodBytes struct {
	Method   string `json:"method"`
	Total    int64  `json:"bytes"`
	PerToken int64  `json:"bytes_per_token"`
	Fits     bool   `json:"fits_in_ram"`
}

// inspectMoEOnly describes modelPath, whose config kt cannot serve (why),
// from its routed experts alone, and returns an error saying kt does not
// serve it (kt inspect then exits with status 1).
func inspectMoEOnly(w io.Writer, modelPath string, why error, avail int64, asJSON bool) error {
	mm, err := expertsource.OpenMoEModel(modelPath)
	if err != nil {
		return err
	}
	shape, et := mm.Shape, mm.Tensors
	r := moeOnlyReport{ModelPath: modelPath, Unsupported: why.Error(), Shape: shape, Prefix: et.Prefix, RAMAvailable: avail,
		Layers: mm.Layers, Beyond: mm.Beyond}
	for _, m := range []cpuexperts.Method{cpuexperts.BF16, cpuexperts.AMXINT8, cpuexperts.AMXINT4} {
		total := m.ExpertBytesEstimate(shape.Hidden, shape.Intermediate) * int64(shape.Experts) * int64(len(r.Layers))
		r.Methods = append(r.Methods, moeMethodBytes{Method: string(m), Total: total, PerToken: mm.TokenBytes(m),
			Fits: avail > 0 && total <= avail*8/10})
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "%-16s %s\n", "model", modelPath)
		fmt.Fprintf(w, "%-16s %s: kt does not serve it yet (%v)\n", "architecture", shape.Architecture, why)
		fmt.Fprintf(w, "%-16s %d MoE layers under %q, %d experts of %d x %d, top-%d\n", "routed experts",
			len(r.Layers), et.Prefix, shape.Experts, shape.Hidden, shape.Intermediate, shape.TopK)
		if len(r.Beyond) > 0 {
			fmt.Fprintf(w, "%-16s layers %v are past num_hidden_layers %d (a multi-token prediction module)\n", "", r.Beyond, shape.Layers)
		}
		for _, mb := range r.Methods {
			verdict := "fit"
			if !mb.Fits {
				verdict = "do NOT fit"
			}
			fmt.Fprintf(w, "%-16s %-8s %8.1f GiB (%s in %.1f GiB available, 80%% rule), %.1f MB read per decoded token\n", "size",
				mb.Method, float64(mb.Total)/(1<<30), verdict, float64(avail)/(1<<30), float64(mb.PerToken)/1e6)
		}
		fmt.Fprintf(w, "%-16s kt quant %s --output DIR --method int8|int4 converts its experts; kt bench --type moe --model-path %s measures a layer on this CPU\n",
			"what works", modelPath, modelPath)
	}
	return fmt.Errorf("inspect: %s: kt does not serve %s yet", modelPath, shape.Architecture)
}
