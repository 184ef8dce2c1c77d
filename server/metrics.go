package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ktserve/kt/engine"
)

// metrics are the Prometheus series, named as SGLang names them so that
// existing dashboards work.
type metrics struct {
	reg       *prometheus.Registry
	ttft      prometheus.Observer
	itl       prometheus.Observer
	e2e       prometheus.Observer
	requests  prometheus.Counter
	aborted   prometheus.Counter
	promptTok prometheus.Counter
	genTok    prometheus.Counter

	mu      sync.Mutex
	samples []tpSample // generation token counts over the last seconds
}

type tpSample struct {
	t time.Time
	n uint64
}

// latencyBuckets are SGLang's TTFT/ITL buckets (seconds).
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 40, 50, 60, 80, 120, 160, 200, 300}

func newMetrics(modelName string, eng *engine.Engine) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	labels := prometheus.Labels{"model_name": modelName}
	m := &metrics{reg: reg}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	ctr := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, f func(engine.Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Stats()) }))
	}
	m.ttft = hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", latencyBuckets)
	m.itl = hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", latencyBuckets)
	m.e2e = hist("sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
		[]float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800})
	m.requests = ctr("sglang:num_requests_total", "Number of requests processed.")
	m.aborted = ctr("sglang:num_aborted_requests_total", "Number of requests aborted by the server.")
	m.promptTok = ctr("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTok = ctr("sglang:generation_tokens_total", "Number of generation tokens processed.")
	gauge("sglang:num_running_reqs", "The number of running requests.", func(s engine.Stats) float64 { return float64(s.Running) })
	gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", func(s engine.Stats) float64 { return float64(s.Queued) })
	gauge("sglang:num_used_tokens", "The number of used tokens.", func(s engine.Stats) float64 { return float64(s.UsedTokens) })
	gauge("sglang:token_usage", "The token usage.", func(s engine.Stats) float64 { return s.TokenUsage() })
	gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache.", func(s engine.Stats) float64 { return float64(s.MaxTotalTokens) })
	gauge("sglang:cache_hit_rate", "The prefix cache hit rate: the fraction of admitted tokens whose KV came from the cache.", func(s engine.Stats) float64 { return s.CacheHitRate() })
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sglang:cached_tokens_total",
		Help:        "Number of prompt tokens whose KV came from the prefix cache (cache_source device: the KV cache's own pages).",
		ConstLabels: prometheus.Labels{"model_name": modelName, "cache_source": "device"}},
		func() float64 { return float64(eng.Stats().PrefixHitTokens) }))
	gauge("sglang:gen_throughput", "The generation throughput (token/s) over the last few seconds.", func(s engine.Stats) float64 { return m.throughput(s) })
	gauge("kt:num_preemptions", "Sequences preempted (and later recomputed) because the KV budget ran out.", func(s engine.Stats) float64 { return float64(s.Preemptions) })
	gauge("kt:forward_steps", "Forward steps run.", func(s engine.Stats) float64 { return float64(s.Steps) })
	gauge("kt:prefix_branches", "Prefills stopped where the prompt left cached pages, to keep the recurrent state of the shared prefix there (linear-attention models).", func(s engine.Stats) float64 { return float64(s.PrefixBranches) })
	return m
}

// throughput returns generated tokens per second over a window of up to
// ten seconds, from the samples taken at each scrape.
func (m *metrics) throughput(s engine.Stats) float64 {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples = append(m.samples, tpSample{now, s.GenerationTokens})
	for len(m.samples) > 2 && now.Sub(m.samples[1].t) > 10*time.Second {
		m.samples = m.samples[1:]
	}
	first := m.samples[0]
	dt := now.Sub(first.t).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(s.GenerationTokens-first.n) / dt
}
