package servebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Attack is one kind of hostile request the soak test's attackers send.
// Each must end in a refusal (a 4xx) or the server closing the connection,
// within Bound, while the ordinary clients keep being served.
type Attack struct {
	Name  string
	Bound time.Duration // the longest the server may take to refuse or cut it
	// send performs one attempt and classifies it.
	send func(ctx context.Context, a *attacker) outcome
}

// outcome is how the server answered one hostile request.
type outcome int

const (
	refused  outcome = iota // a 4xx status
	cut                     // the server closed the connection
	accepted                // a 2xx: the server did the work
	failed                  // a 5xx, or no answer within the bound
)

var outcomeNames = [...]string{"refused", "cut", "accepted", "failed"}

// AttackStats counts the outcomes of one attack kind.
type AttackStats struct {
	Name                           string
	Refused, Cut, Accepted, Failed int
	Slowest                        time.Duration // the longest attempt
	FirstFailure                   string
}

// attacker sends hostile requests to one server.
type attacker struct {
	base, host, apiKey string
	vocab              int
	http               *http.Client
	lastDetail         string // what the last accepted or failed attempt got
}

// post sends body raw (not re-encoded) and classifies the answer.
func (a *attacker) post(ctx context.Context, path string, body []byte) (outcome, string) {
	req, err := http.NewRequestWithContext(ctx, "POST", a.base+path, bytes.NewReader(body))
	if err != nil {
		return failed, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if a.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+a.apiKey)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return failed, "no answer within the bound"
		}
		return cut, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return refused, ""
	case resp.StatusCode < 300:
		return accepted, fmt.Sprintf("%s: HTTP %d", path, resp.StatusCode)
	default:
		return failed, fmt.Sprintf("%s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
}

// hold opens a raw connection, writes prefix, and waits for the server to
// close it: cut when it does within the bound.
func (a *attacker) hold(ctx context.Context, prefix string) (outcome, string) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", a.host)
	if err != nil {
		return failed, err.Error()
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if prefix != "" {
		if line, rest, ok := strings.Cut(prefix, "\r\n"); ok && a.apiKey != "" {
			// Authenticated, so the server's own limits are what is tested.
			prefix = line + "\r\nAuthorization: Bearer " + a.apiKey + "\r\n" + rest
		}
		if _, err := io.WriteString(conn, prefix); err != nil {
			return cut, ""
		}
	}
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return failed, "connection held past the bound"
			}
			return cut, ""
		}
		if n > 0 && bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 4")) {
			return refused, ""
		}
	}
}

// Attacks is the attack mix, after the hostile inputs a public server
// meets: oversized and malformed bodies, compile-time bombs, unbounded
// batches, slow and idle connections.
func Attacks() []Attack {
	return []Attack{
		{"schema with 8000 optional properties", 20 * time.Second, func(ctx context.Context, a *attacker) outcome {
			var b strings.Builder
			b.WriteString(`{"text":"x","sampling_params":{"max_new_tokens":4,"json_schema":"{\"type\":\"object\",\"properties\":{`)
			for i := range 8000 {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `\"p%d\":{\"type\":\"string\"}`, i)
			}
			b.WriteString(`}}"}}`)
			return a.record(a.post(ctx, "/generate", []byte(b.String())))
		}},
		{"batch of 1000 prompts x 500 tokens x 20 top logprobs", 20 * time.Second, func(ctx context.Context, a *attacker) outcome {
			var b strings.Builder
			b.WriteString(`{"input_ids":[`)
			for i := range 1000 {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "[%d,%d]", i%a.vocab, (i+1)%a.vocab)
			}
			b.WriteString(`],"return_logprob":true,"top_logprobs_num":20,"sampling_params":{"max_new_tokens":500,"ignore_eos":true}}`)
			return a.record(a.post(ctx, "/generate", []byte(b.String())))
		}},
		{"4 MB prompt of spaces", 20 * time.Second, func(ctx context.Context, a *attacker) outcome {
			body := `{"model":"m","max_tokens":4,"prompt":"` + strings.Repeat(" ", 4<<20) + `"}`
			return a.record(a.post(ctx, "/v1/completions", []byte(body)))
		}},
		{"JSON nested 100000 deep", 10 * time.Second, func(ctx context.Context, a *attacker) outcome {
			body := `{"text":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
			return a.record(a.post(ctx, "/generate", []byte(body)))
		}},
		{"truncated and mistyped JSON", 10 * time.Second, func(ctx context.Context, a *attacker) outcome {
			for _, body := range []string{`{"text": "x", "sampling_params": {"max_new_tokens": `, `{"input_ids": "abc"}`, `{"text": 5}`, `{"text":"x","sampling_params":{"max_new_tokens":-1}}`} {
				if o := a.record(a.post(ctx, "/generate", []byte(body))); o != refused {
					return o
				}
			}
			return refused
		}},
		{"slowloris: a header never finished", 30 * time.Second, func(ctx context.Context, a *attacker) outcome {
			return a.record(a.hold(ctx, "POST /generate HTTP/1.1\r\nHost: x\r\nX-Slow: "))
		}},
		{"idle connection, nothing sent", 60 * time.Second, func(ctx context.Context, a *attacker) outcome {
			return a.record(a.hold(ctx, ""))
		}},
		{"body sent slower than the read timeout", 90 * time.Second, func(ctx context.Context, a *attacker) outcome {
			return a.record(a.hold(ctx, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"text\": \""))
		}},
	}
}

// record keeps the detail of an outcome for the report and returns it.
func (a *attacker) record(o outcome, detail string) outcome {
	if detail != "" && o != refused && o != cut {
		a.lastDetail = detail
	}
	return o
}

// runAttacks has n attackers send the attack mix, round robin, until ctx
// ends, and returns the outcomes per attack.
func runAttacks(ctx context.Context, base, apiKey string, vocab, n int) ([]AttackStats, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("servebench: base URL %q: %w", base, err)
	}
	attacks := Attacks()
	stats := make([]AttackStats, len(attacks))
	for i, at := range attacks {
		stats[i].Name = at.Name
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			a := &attacker{base: strings.TrimSuffix(base, "/"), host: u.Host, apiKey: apiKey, vocab: max(vocab, 2),
				http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
			for k := w; ctx.Err() == nil; k++ {
				i := k % len(attacks)
				actx, cancel := context.WithTimeout(ctx, attacks[i].Bound)
				start := time.Now()
				a.lastDetail = ""
				o := attacks[i].send(actx, a)
				took := time.Since(start)
				dl, hasDL := ctx.Deadline()
				stop := ctx.Err() != nil || (hasDL && !time.Now().Before(dl))
				cancel()
				if stop {
					return // the run ended mid-attempt: not the server's doing
				}
				mu.Lock()
				s := &stats[i]
				switch o {
				case refused:
					s.Refused++
				case cut:
					s.Cut++
				case accepted:
					s.Accepted++
				default:
					s.Failed++
				}
				if o == accepted || o == failed {
					if s.FirstFailure == "" {
						s.FirstFailure = outcomeNames[o] + ": " + a.lastDetail
					}
				}
				s.Slowest = max(s.Slowest, took)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return stats, nil
}
