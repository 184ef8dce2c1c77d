package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ktserve/kt/internal/units"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/sysinfo"
	"github.com/ktserve/kt/tokenizer"
)

// modelState is the model directory, loaded once for all model checks.
type modelState struct {
	cfg       *modelconfig.Config
	cfgErr    error
	report    *modelconfig.Report
	weightErr error
}

func (env *Env) loadModel() *modelState {
	if env.model != nil {
		return env.model
	}
	m := &modelState{}
	env.model = m
	m.cfg, m.cfgErr = modelconfig.Load(env.ModelPath)
	if m.cfgErr != nil {
		return m
	}
	ck, err := safetensors.OpenDir(env.ModelPath)
	if err != nil {
		m.weightErr = err
		return m
	}
	defer ck.Close()
	m.report = modelconfig.Check(m.cfg, ck)
	return m
}

func modelChecks() []Check {
	return []Check{
		{"model.config", checkModelConfig},
		{"model.generation", checkGenerationConfig},
		{"model.tokenizer", checkTokenizer},
		{"model.weights", checkWeights},
		{"model.disk", checkDisk},
		{"model.fit", checkFit},
		{"model.tp", checkTP},
	}
}

func modelResult(name string) Result { return Result{Section: "model", Name: name} }

func checkModelConfig(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	r := modelResult("model.config")
	if st, err := os.Stat(env.ModelPath); err != nil || !st.IsDir() {
		r.Status, r.Detail = Fail, fmt.Sprintf("%s is not a readable directory", env.ModelPath)
		r.Hint = "pass the directory holding config.json and the *.safetensors files"
		return []Result{r}
	}
	m := env.loadModel()
	if m.cfgErr != nil {
		r.Status, r.Detail = Fail, oneLine(m.cfgErr)
		r.Hint = "kt supports " + strings.Join(modelconfig.SupportedArchitectures(), ", ") + "; the config.json must be the one published with the weights"
		if ms, err := modelconfig.LoadMoEShape(env.ModelPath); err == nil {
			// kt cannot serve it, but its routed experts are no mystery
			r.Hint += fmt.Sprintf("; its routed experts (%d of %d x %d, top-%d) can still be converted (kt quant) and measured on this CPU (kt bench --type moe --model-path %s)",
				ms.Experts, ms.Hidden, ms.Intermediate, ms.TopK, env.ModelPath)
			r.Data = map[string]any{"architecture": ms.Architecture, "experts": ms.Experts, "hidden": ms.Hidden,
				"moe_intermediate": ms.Intermediate, "top_k": ms.TopK}
		}
		return []Result{r}
	}
	c := m.cfg
	r.Status = Pass
	r.Detail = fmt.Sprintf("%s: %d layers (%d MoE, %d dense; %d full attention, %d linear), %d experts top-%d, hidden %d, vocab %d, KV cache %d bytes per token",
		c.Architecture, c.NumLayers, c.NumMoELayers(), c.NumLayers-c.NumMoELayers(), c.NumLayers-c.NumLinearLayers(), c.NumLinearLayers(),
		c.NumExperts, c.TopK, c.HiddenSize, c.VocabSize, c.KVBytesPerToken())
	r.Data = map[string]any{"architecture": c.Architecture, "layers": c.NumLayers, "moe_layers": c.NumMoELayers(),
		"linear_attention_layers": c.NumLinearLayers(), "experts": c.NumExperts, "top_k": c.TopK, "kv_bytes_per_token": c.KVBytesPerToken()}
	return []Result{r}
}

func checkGenerationConfig(env *Env) []Result {
	if env.ModelPath == "" || env.loadModel().cfgErr != nil {
		return nil
	}
	r := modelResult("model.generation")
	g, ok, err := modelconfig.LoadGeneration(env.ModelPath)
	switch {
	case err != nil:
		r.Status, r.Detail = Fail, oneLine(err)
		r.Hint = "fix or remove generation_config.json"
	case !ok:
		r.Status, r.Detail = Warn, "no generation_config.json"
		r.Hint = "stop tokens come from config.json alone and sampling defaults from the request; copy generation_config.json from the model's release"
	default:
		stops := modelconfig.StopTokenIDs(env.loadModel().cfg, g)
		r.Status = Pass
		r.Detail = fmt.Sprintf("stop token ids %v", stops)
		if g.Temperature != nil {
			r.Detail += fmt.Sprintf(", temperature %g", *g.Temperature)
		}
		if g.TopP != nil {
			r.Detail += fmt.Sprintf(", top_p %g", *g.TopP)
		}
		if g.TopK != nil {
			r.Detail += fmt.Sprintf(", top_k %d", *g.TopK)
		}
		r.Data = map[string]any{"stop_token_ids": stops}
		if len(stops) == 0 {
			r.Status = Warn
			r.Hint = "no eos_token_id anywhere: generation only stops at max_tokens"
		}
	}
	return []Result{r}
}

func checkTokenizer(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	r := modelResult("model.tokenizer")
	var missing []string
	file := tokenizer.FileIn(env.ModelPath)
	if file == "" {
		missing = append(missing, "tokenizer.json (or Kimi-K2's "+tokenizer.TiktokenFile+")")
	}
	if _, err := os.Stat(filepath.Join(env.ModelPath, "tokenizer_config.json")); errors.Is(err, fs.ErrNotExist) {
		missing = append(missing, "tokenizer_config.json")
	}
	if len(missing) == 0 {
		r.Status, r.Detail = Pass, file+" and tokenizer_config.json present"
	} else {
		r.Status, r.Detail = Warn, "missing "+strings.Join(missing, ", ")
		r.Hint = "text requests need the tokenizer files of the model's release (--tokenizer-path can point elsewhere); token-id requests work without"
	}
	return []Result{r}
}

func checkWeights(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	m := env.loadModel()
	if m.cfgErr != nil {
		return nil
	}
	r := modelResult("model.weights")
	if m.weightErr != nil {
		r.Status, r.Detail = Fail, oneLine(m.weightErr)
		r.Hint = "re-download the named file (a truncated or corrupt download is the usual cause)"
		return []Result{r}
	}
	rep := m.report
	r.Data = map[string]any{"tensors": rep.NumTensors, "bytes": rep.TotalBytes, "expert_layout": rep.ExpertLayout,
		"routed_expert_bytes": rep.RoutedExpertBytes, "problems": rep.Problems, "unexpected": rep.Unexpected}
	if !rep.OK() {
		r.Status = Fail
		show := rep.Problems
		if len(show) > 10 {
			show = show[:10]
		}
		r.Detail = fmt.Sprintf("%d problems: %s", len(rep.Problems), strings.Join(show, "; "))
		if len(rep.Problems) > len(show) {
			r.Detail += fmt.Sprintf("; ... (%d more; --json lists all)", len(rep.Problems)-len(show))
		}
		r.Hint = "the weights do not match config.json: check both come from the same release and that no shard is missing"
		return []Result{r}
	}
	r.Status = Pass
	r.Detail = fmt.Sprintf("all %d tensors the config implies are present with the right shapes (%d tensors, %s, experts %s)",
		rep.NumTensors-rep.Extras-len(rep.Unexpected), rep.NumTensors, units.Bytes(rep.TotalBytes), rep.ExpertLayout)
	out := []Result{r}
	if len(rep.Unexpected) > 0 {
		show := rep.Unexpected
		if len(show) > 5 {
			show = show[:5]
		}
		out = append(out, Result{Section: "model", Name: "model.weights.extra", Status: Warn,
			Detail: fmt.Sprintf("%d tensors kt will ignore: %s", len(rep.Unexpected), strings.Join(show, ", ")),
			Hint:   "harmless if the checkpoint carries extras (adapters, quantisation leftovers); otherwise the config may be for another model"})
	}
	return out
}

func checkDisk(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	r := modelResult("model.disk")
	free, err := sysinfo.DiskFree(env.ModelPath)
	if err != nil {
		r.Status, r.Detail, r.Hint = Warn, oneLine(err), "could not read free space"
		return []Result{r}
	}
	r.Data = map[string]any{"free": free}
	r.Detail = fmt.Sprintf("%s free on the model's file system", GiB(free))
	m := env.loadModel()
	need := int64(0)
	if m.report != nil {
		need = m.report.RoutedExpertBytes / 2 // an INT8 copy from kt quant
	}
	switch {
	case need > 0 && free < need:
		r.Status = Warn
		r.Hint = fmt.Sprintf("kt quant writes converted experts next to the model: INT8 needs about %s, INT4 about %s", GiB(need), GiB(need/2))
	default:
		r.Status = Pass
	}
	return []Result{r}
}

func checkFit(env *Env) []Result {
	if env.ModelPath == "" {
		return nil
	}
	m := env.loadModel()
	if m.report == nil {
		return nil
	}
	r := modelResult("model.fit")
	experts := m.report.RoutedExpertBytes
	avail := env.Sys.Memory.EffectiveMemory()
	r.Data = map[string]any{"routed_expert_bytes": experts, "available": avail}
	r.Detail = fmt.Sprintf("routed experts take %s; %s of RAM available", units.Bytes(experts), GiB(avail))
	switch {
	case avail == 0:
		r.Status, r.Hint = Warn, "available memory unknown"
	case experts <= avail*8/10:
		r.Status = Pass
	case experts <= avail:
		r.Status = Warn
		r.Hint = "the experts fit with under 20% to spare; the KV cache, activations and page cache need the rest. Quantise with kt quant (INT8 halves, INT4 quarters BF16) or free memory"
	default:
		r.Status = Fail
		r.Hint = fmt.Sprintf("the routed experts do not fit in RAM: quantise them with kt quant (INT4 needs about %s) or use a machine with more memory", GiB(experts/4))
	}
	return []Result{r}
}

// oneLine flattens a (possibly joined) error onto one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
