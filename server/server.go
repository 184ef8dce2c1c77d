// Package server is kt's HTTP front end: the OpenAI API (/v1/chat/completions,
// /v1/completions, /v1/responses, /v1/models, /v1/tokenize, /v1/detokenize),
// the Anthropic Messages API (/v1/messages), SGLang's native routes
// (/generate, /health, /health_generate, /get_model_info, /get_server_info,
// /get_memory_pool_size, /flush_cache, /tokenize, /detokenize) and
// Prometheus /metrics with SGLang's metric names.
// Every request runs in its own goroutine: templating, tokenizing,
// detokenizing, stop strings and reasoning/tool-call parsing happen there;
// only token ids go through the engine's scheduler.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/engine"
)

// Tokenizer is what the server needs from a tokenizer; *tokenizer.Tokenizer
// implements it.
type Tokenizer interface {
	Encode(text string) []int32
	Decode(ids []int32) string
	DecodeSkipSpecial(ids []int32) string
	// TokenBytes returns the raw bytes of one token (maybe part of a
	// UTF-8 character).
	TokenBytes(id int32) ([]byte, bool)
	IsSpecial(id int32) bool
}

// ChatTemplate renders a conversation into a prompt; *chattemplate.Template
// implements it. The conversation's messages and tools are the request's
// JSON with the client's key order, so tojson prints them as transformers
// would.
type ChatTemplate interface {
	RenderContext(ctx context.Context, c chattemplate.Conversation) (string, error)
}

// Options configures a Server.
type Options struct {
	Engine    *engine.Engine
	ModelName string // the served model name requests must use
	ModelPath string
	// Tokenizer is nil when the server runs with --skip-tokenizer-init:
	// then only /generate with input_ids works.
	Tokenizer     Tokenizer
	TokenizerPath string
	Template      ChatTemplate // nil: chat routes answer 400
	// ReasoningParser is "none" or one of SGLang's names kt implements:
	// qwen3, deepseek-r1, deepseek-v3, kimi, kimi_k2 (reasoningFormatFor).
	ReasoningParser string
	// ToolCallParser is "none", "qwen"/"qwen25" or "qwen3_coder" (both Qwen
	// formats are parsed; forced tool_choice calls are written in the one
	// named), or deepseekv3, deepseekv31, kimi_k2 (toolformats.go).
	ToolCallParser string
	APIKey         string
	// ServerArgs is reported by /get_server_info (the parsed flags).
	ServerArgs any
	// TPSize is the model's tensor-parallel size, /get_server_info's
	// tp_size (0 means 1).
	TPSize int
	// LoRANames lists the adapters requests may name as MODEL:ADAPTER.
	LoRANames []string
	// LoRAPaths[i] is the directory of LoRANames[i]: /v1/models lists each
	// adapter as SGLang does (id NAME, root its path, parent the served model).
	LoRAPaths []string
	Version   string
	Logger    *slog.Logger
	// AccessLog logs one line per request at info level.
	AccessLog bool
	// CacheReport reports usage.prompt_tokens_details.cached_tokens
	// (--enable-cache-report; null otherwise, as in SGLang).
	CacheReport bool
	// Experts is the expert-distribution recorder (nil: recording is off).
	Experts ExpertRecorder
	// Limits bounds connections, HTTP timeouts, body and prompt sizes.
	Limits Limits
	// StreamOutput makes streamed /generate chunks incremental
	// (--stream-output): text, output_ids and logprobs new since the
	// previous chunk instead of everything so far.
	StreamOutput bool
	// PageSize is the KV cache page in tokens, reported by
	// /get_server_info (0: not reported).
	PageSize int
}

// Server serves the HTTP API on top of an engine.
type Server struct {
	opt     Options
	eng     *engine.Engine
	tok     Tokenizer
	log     *slog.Logger
	met     *metrics
	started time.Time
	mux     *http.ServeMux
	gram    *grammars // compiled output constraints
	lim     Limits
}

// New returns a server; Handler gives its routes.
func New(opt Options) (*Server, error) {
	if opt.Engine == nil {
		return nil, errors.New("server: no engine")
	}
	if opt.ModelName == "" {
		return nil, errors.New("server: no model name")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	for _, p := range []*string{&opt.ReasoningParser, &opt.ToolCallParser} {
		if *p == "" {
			*p = "none"
		}
	}
	if opt.ReasoningParser != "none" && reasoningFormatFor(opt.ReasoningParser, "", nil) == nil {
		return nil, fmt.Errorf("server: unknown reasoning parser %q", opt.ReasoningParser)
	}
	switch opt.ToolCallParser {
	case "none", "qwen", "qwen25", "qwen3_coder", "deepseekv3", "deepseekv31", "kimi_k2":
	default:
		return nil, fmt.Errorf("server: unknown tool-call parser %q", opt.ToolCallParser)
	}
	s := &Server{opt: opt, eng: opt.Engine, tok: opt.Tokenizer, log: opt.Logger, started: time.Now(), gram: &grammars{},
		lim: opt.Limits.withDefaults(opt.Engine.ContextLength())}
	s.met = newMetrics(opt.ModelName, opt.Engine)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)
	mux.HandleFunc("POST /generate", s.handleGenerate)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /health_generate", s.handleHealthGenerate)
	mux.HandleFunc("GET /get_model_info", s.handleModelInfo)
	mux.HandleFunc("GET /get_server_info", s.handleServerInfo)
	mux.HandleFunc("GET /server_info", s.handleServerInfo)
	mux.HandleFunc("POST /flush_cache", s.handleFlushCache)
	mux.HandleFunc("GET /flush_cache", s.handleFlushCache)
	for _, a := range []string{"start", "stop", "dump"} {
		mux.HandleFunc("GET /"+a+"_expert_distribution_record", s.handleExpertRecord(a))
		mux.HandleFunc("POST /"+a+"_expert_distribution_record", s.handleExpertRecord(a))
	}
	s.sglangRoutes(mux)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "not_found_error", Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	s.mux = mux
	return s, nil
}

// Handler returns the HTTP handler with authentication and access logging.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// A keep-alive connection keeps the last response's write deadline.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, writeTimeout: s.lim.WriteTimeout}
		switch {
		case s.opt.APIKey != "" && !openRoute(r.URL.Path) && !s.authorized(r):
			// The body stays unread: close the connection rather than let
			// net/http drain the body, which a client could trickle forever.
			w.Header().Set("Connection", "close")
			routeError(sw, r, &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key",
				Message: "missing or wrong API key: send the header Authorization: Bearer <--api-key> (or X-API-Key)"})
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		default:
			if err := s.readBody(sw, r); err != nil {
				routeError(sw, r, err)
				break
			}
			s.mux.ServeHTTP(sw, r)
		}
		if s.opt.AccessLog {
			s.log.Info("http", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start).Round(time.Microsecond), "remote", r.RemoteAddr)
		}
	})
}

// openRoute reports whether path is served without the API key: as in
// SGLang, the health checks (/health, /health_generate) and /metrics, which
// load balancers and Prometheus scrape without credentials.
func openRoute(path string) bool {
	return strings.HasPrefix(path, "/health") || strings.HasPrefix(path, "/metrics")
}

// authorized reports whether r carries the API key, as Authorization:
// Bearer KEY (the scheme in any case) or X-API-Key: KEY.
func (s *Server) authorized(r *http.Request) bool {
	got := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(strings.TrimSpace(got), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		key = r.Header.Get("X-API-Key")
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(s.opt.APIKey)) == 1
}

// statusWriter records the status for the access log; it keeps Flush
// working through http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status       int
	writeTimeout time.Duration
}

func (w *statusWriter) armWriteDeadline() {
	_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.writeTimeout))
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) {
	armWriteDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkModel resolves the request's model field: empty or the served name
// is the base model; NAME:ADAPTER names a LoRA adapter.
func (s *Server) checkModel(model string) error {
	_, err := s.adapterOf(model)
	return err
}

// adapterOf resolves the request's model field to the adapter id the
// engine runs it with, as SGLang does: the model name itself is not
// checked (any name is the served model); MODEL:ADAPTER (split at the first
// colon, spaces trimmed) names a LoRA adapter, i+1 for LoRANames[i]; an
// empty adapter part, or the served name itself, is the base model (0;
// with KT expert LoRA that is base + expert LoRA, as SGLang-KT).
func (s *Server) adapterOf(model string) (int, error) {
	if model == s.opt.ModelName {
		return 0, nil
	}
	_, adapter, ok := strings.Cut(model, ":")
	adapter = strings.TrimSpace(adapter)
	if !ok || adapter == "" {
		return 0, nil
	}
	if len(s.opt.LoRANames) == 0 {
		return 0, badRequest("model", "LoRA adapter %q was requested, but LoRA is not enabled: start kt serve with --enable-lora and --lora-paths NAME=DIR", adapter)
	}
	for i, n := range s.opt.LoRANames {
		if n == adapter {
			return i + 1, nil
		}
	}
	return 0, badRequest("model", "Got LoRA adapter that has never been loaded: %s (this server has %s)", adapter, loraList(s.opt.LoRANames))
}

func loraList(names []string) string {
	if len(names) == 0 {
		return "no adapters"
	}
	return "adapters " + strings.Join(names, ", ")
}

func (s *Server) needTokenizer() error {
	if s.tok == nil {
		return badRequest("", "this server was started with --skip-tokenizer-init: it has no tokenizer, so only /generate with input_ids works")
	}
	return nil
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	cards := []any{s.modelCard()}
	for i, n := range s.opt.LoRANames {
		root := ""
		if i < len(s.opt.LoRAPaths) {
			root = s.opt.LoRAPaths[i]
		}
		cards = append(cards, map[string]any{"id": n, "object": "model", "created": s.started.Unix(), "owned_by": "kt",
			"root": root, "parent": s.opt.ModelName, "max_model_len": nil})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": cards})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if name != s.opt.ModelName {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model %q does not exist; this server serves %q", name, s.opt.ModelName)})
		return
	}
	writeJSON(w, http.StatusOK, s.modelCard())
}

func (s *Server) modelCard() map[string]any {
	return map[string]any{"id": s.opt.ModelName, "object": "model", "created": s.started.Unix(), "owned_by": "kt",
		"root": s.opt.ModelName, "max_model_len": s.eng.ContextLength()}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.eng.Done():
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Message: "the engine has stopped"})
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// handleHealthGenerate generates one token to check the whole path.
func (s *Server) handleHealthGenerate(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	p := engine.DefaultSamplingParams()
	p.Temperature = 0
	p.MaxNewTokens = 1
	p.IgnoreEOS = true
	res, err := s.run(ctx, genSpec{req: engine.Request{ID: "health_generate", Prompt: []int32{0}, Params: p}}, func(genDelta) error { return nil })
	if err == nil && res.Reason == engine.FinishAbort {
		err = res.Err
		if err == nil {
			err = errors.New("aborted")
		}
	}
	if err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Message: "health generation failed: " + err.Error()})
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModelInfo(w http.ResponseWriter, r *http.Request) {
	info := s.eng.Info()
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                s.opt.ModelPath,
		"tokenizer_path":            s.opt.TokenizerPath,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            "default",
		"has_image_understanding":   false,
		"has_audio_understanding":   false,
		"model_type":                info.Architecture,
		"architectures":             []string{info.Architecture},
		"vocab_size":                info.VocabSize, // kt extension: lets kt bench draw random prompt ids
	})
}

func (s *Server) handleServerInfo(w http.ResponseWriter, r *http.Request) {
	st := s.eng.Stats()
	out := map[string]any{}
	if s.opt.ServerArgs != nil {
		b, err := json.Marshal(s.opt.ServerArgs)
		if err == nil {
			_ = json.Unmarshal(b, &out)
		}
	}
	for k, v := range map[string]any{"model_path": s.opt.ModelPath, "tokenizer_path": s.opt.TokenizerPath,
		"served_model_name": s.opt.ModelName, "stream_output": s.opt.StreamOutput} {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	out["version"] = s.opt.Version
	out["tp_size"] = max(s.opt.TPSize, 1)
	out["max_total_num_tokens"] = st.MaxTotalTokens
	out["max_req_input_len"] = s.eng.MaxSequenceTokens() - 1
	out["context_length"] = s.eng.ContextLength()
	if s.opt.PageSize > 0 {
		out["page_size"] = s.opt.PageSize
	}
	out["internal_states"] = []any{map[string]any{
		"num_running_reqs": st.Running, "num_queue_reqs": st.Queued, "num_used_tokens": st.UsedTokens,
		"token_usage": st.TokenUsage(), "num_preemptions": st.Preemptions, "forward_steps": st.Steps,
		"prompt_tokens_total": st.PromptTokens, "generation_tokens_total": st.GenerationTokens,
		"last_step_tokens": st.LastStepTokens, "last_step_seconds": st.LastStepDuration.Seconds(),
		"radix_cache": st.RadixCache, "cache_hit_rate": st.CacheHitRate(), "cached_tokens": st.CachedTokens,
		"prefix_branches": st.PrefixBranches,
	}}
	out["eos_token_ids"] = s.eng.EOSTokenIDs()
	out["reasoning_parser"] = s.opt.ReasoningParser
	out["tool_call_parser"] = s.opt.ToolCallParser
	out["uptime_seconds"] = time.Since(s.started).Seconds()
	writeJSON(w, http.StatusOK, out)
}

// handleFlushCache empties the prefix cache and answers as SGLang does:
// 200 when it was flushed, 400 when requests were running or waiting (the
// cache is then left alone).
func (s *Server) handleFlushCache(w http.ResponseWriter, r *http.Request) {
	err := s.eng.FlushCache(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		s.log.Info("flush_cache refused", "err", err)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "Cache not flushed: %v.\nWhen there are running or waiting requests, the operation is not performed.\n", err)
		return
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "Cache flushed.\n")
}

type tokenizeRequest struct {
	Model            string          `json:"model"`
	Prompt           json.RawMessage `json:"prompt"`
	Text             json.RawMessage `json:"text"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.needTokenizer(); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	raw, field := req.Prompt, "prompt"
	if len(raw) == 0 {
		raw, field = req.Text, "text"
	}
	var one string
	var many []string
	switch {
	case len(raw) == 0:
		writeError(w, badRequest("prompt", "give the text to tokenize in \"prompt\""))
		return
	case json.Unmarshal(raw, &one) == nil:
		ids, err := s.encode(field, one)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": nonNil(ids), "count": len(ids), "max_model_len": s.eng.ContextLength()})
	case json.Unmarshal(raw, &many) == nil:
		all := make([][]int32, len(many))
		counts := make([]int, len(many))
		for i, t := range many {
			ids, err := s.encode(field, t)
			if err != nil {
				writeError(w, err)
				return
			}
			all[i], counts[i] = nonNil(ids), len(ids)
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": all, "count": counts, "max_model_len": s.eng.ContextLength()})
	default:
		writeError(w, badRequest(field, "field %q: expected a string or an array of strings", field))
	}
}

type detokenizeRequest struct {
	Model             string          `json:"model"`
	Tokens            json.RawMessage `json:"tokens"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"` // default true, as SGLang
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := s.needTokenizer(); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	decode := s.tok.DecodeSkipSpecial
	if req.SkipSpecialTokens != nil && !*req.SkipSpecialTokens {
		decode = s.tok.Decode
	}
	vocab := s.eng.Info().VocabSize
	check := func(ids []int32) error {
		for i, t := range ids {
			if t < 0 || int(t) >= vocab {
				return badRequest("tokens", "token %d at index %d is outside the vocabulary [0, %d)", t, i, vocab)
			}
		}
		return nil
	}
	var one []int32
	var many [][]int32
	switch {
	case len(req.Tokens) == 0:
		writeError(w, badRequest("tokens", "give the token ids to detokenize in \"tokens\""))
	case json.Unmarshal(req.Tokens, &one) == nil:
		if err := check(one); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"text": decode(one)})
	case json.Unmarshal(req.Tokens, &many) == nil:
		texts := make([]string, len(many))
		for i, ids := range many {
			if err := check(ids); err != nil {
				writeError(w, err)
				return
			}
			texts[i] = decode(ids)
		}
		writeJSON(w, http.StatusOK, map[string]any{"text": texts})
	default:
		writeError(w, badRequest("tokens", "field \"tokens\": expected an array of integer token ids"))
	}
}

func isInvalid(err error) bool { return errors.Is(err, engine.ErrInvalidRequest) }
