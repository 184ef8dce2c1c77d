package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ktserve/kt/engine"
)

// Limits bounds what one client can hold of the server: connections,
// time to send a request or read a response, and bytes of request and
// prompt. A zero field takes its DefaultLimits value.
type Limits struct {
	// MaxConnections caps open client connections; at the cap new ones
	// wait in the listen backlog until one closes.
	MaxConnections int
	// ReadHeaderTimeout bounds the time to send a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time to send a request's body.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time the client takes to read one
	// non-streaming response, or one event of a stream.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for this long.
	IdleTimeout time.Duration
	// MaxBodyBytes bounds a request body (413 above).
	MaxBodyBytes int64
	// MaxPromptBytes bounds a prompt's text before it is tokenized (400
	// above); 0: PromptBytesPerToken bytes per token of the context length.
	MaxPromptBytes int
	// MaxBatchSequences bounds the sequences one request runs: its
	// prompts times n (400 above).
	MaxBatchSequences int
	// MaxResponseBytes bounds a request's estimated response size, from
	// its sequences, their token budgets and logprobs (400 above).
	MaxResponseBytes int64
}

// PromptBytesPerToken is the default prompt byte bound per token of
// context: well above what real text takes (about 4 bytes a token), so only
// a prompt that cannot fit the context is refused unread.
const PromptBytesPerToken = 16

// DefaultLimits returns the limits kt serves with unless flags say otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:    256,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxBodyBytes:      32 << 20,
		MaxBatchSequences: 256,
		MaxResponseBytes:  256 << 20,
	}
}

// withDefaults fills zero fields; contextLen derives MaxPromptBytes.
func (l Limits) withDefaults(contextLen int) Limits {
	d := DefaultLimits()
	if l.MaxConnections <= 0 {
		l.MaxConnections = d.MaxConnections
	}
	for _, p := range []struct{ v, d *time.Duration }{
		{&l.ReadHeaderTimeout, &d.ReadHeaderTimeout}, {&l.ReadTimeout, &d.ReadTimeout},
		{&l.WriteTimeout, &d.WriteTimeout}, {&l.IdleTimeout, &d.IdleTimeout},
	} {
		if *p.v <= 0 {
			*p.v = *p.d
		}
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxBatchSequences <= 0 {
		l.MaxBatchSequences = d.MaxBatchSequences
	}
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = d.MaxResponseBytes
	}
	if l.MaxPromptBytes <= 0 {
		l.MaxPromptBytes = contextLen * PromptBytesPerToken
		if contextLen <= 0 || int64(l.MaxPromptBytes) > l.MaxBodyBytes {
			l.MaxPromptBytes = int(l.MaxBodyBytes)
		}
	}
	return l
}

// HTTPServer returns an http.Server for Handler with the header and idle
// timeouts. Body and write deadlines are set per request by Handler (a
// server-wide ReadTimeout or WriteTimeout would cut long generations and
// streams). Serve it on Listener(ln).
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.lim.ReadHeaderTimeout,
		IdleTimeout:       s.lim.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
	}
}

// Listener wraps ln so that at most MaxConnections connections are open
// at once; Accept waits for one to close at the cap.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, s.lim.MaxConnections), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, sem: l.sem}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	sem  chan struct{}
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.sem })
	return err
}

// readBody reads r's body whole within ReadTimeout and MaxBodyBytes and
// puts it back as an in-memory reader, so that a slowly sent or oversized
// body is cut before any handler runs.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.lim.ReadTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.lim.MaxBodyBytes))
	if err != nil {
		// The deadline stays: nothing more is read from this client.
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Message: fmt.Sprintf("request body larger than %d bytes (--max-request-body-bytes)", mbe.Limit)}
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			return &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
				Message: fmt.Sprintf("request body not received within %v (--http-read-timeout)", s.lim.ReadTimeout)}
		default:
			return badRequest("", "reading the request body: %v", err)
		}
	}
	// Clear the deadline before it ends the server's read that watches
	// the idle connection (that would cancel the request).
	_ = rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(data))
	return nil
}

// armWriteDeadline gives the client WriteTimeout from now to read what the
// handler writes next; writeJSON, writeError and each stream event call it.
func armWriteDeadline(w http.ResponseWriter) {
	if a, ok := w.(interface{ armWriteDeadline() }); ok {
		a.armWriteDeadline()
	}
}

// encode tokenizes one prompt text after checking its length in bytes, so
// that a prompt far too long for the context costs no tokenizing.
func (s *Server) encode(field, text string) ([]int32, error) {
	if len(text) > s.lim.MaxPromptBytes {
		return nil, badRequest(field, "%s is %d bytes; at most %d bytes are tokenized (--max-prompt-bytes, by default %d bytes per token of the %d-token context)",
			field, len(text), s.lim.MaxPromptBytes, PromptBytesPerToken, s.eng.ContextLength())
	}
	return s.tok.Encode(text), nil
}

// Per-entry byte estimates of a response: an output token without
// logprobs (its id and text), and one logprob entry (a token's logprob,
// id and text, chosen or among the top alternatives).
const (
	tokenBytes        = 16
	logprobEntryBytes = 64
)

// batchFields names, in an endpoint's own terms, the request fields that
// set its batch size and response size.
type batchFields struct {
	prompts, n, maxTokens, topLogprobs string
}

// batchBound adds up what a request's sequences may hold of the server
// before any of them is queued.
type batchBound struct {
	seqs  int
	bytes int64
}

// add counts n sequences of prompt with parameters p: each may produce
// p.MaxNewTokens tokens (at most what the sequence limit leaves; none when
// it scores the prompt only), plus an entry per prompt token when prompt
// logprobs are asked; with logprobs, each entry holds 1 + TopLogprobs (for
// the prompt, PromptTopLogprobs) + len(TokenIDsLogprob) logprob entries.
func (b *batchBound) add(s *Server, n int, prompt []int32, p engine.SamplingParams) {
	tokens := int64(max(s.eng.MaxSequenceTokens()-len(prompt), 1))
	if p.MaxNewTokens > 0 {
		tokens = min(tokens, int64(p.MaxNewTokens)) // more is refused by precheck
	}
	if p.PromptOnly {
		tokens = 0
	}
	per := int64(tokenBytes)
	var promptBytes int64
	if p.Logprobs {
		ids := int64(len(p.TokenIDsLogprob))
		per = (1 + int64(p.TopLogprobs) + ids) * logprobEntryBytes
		if p.PromptLogprobs {
			promptBytes = int64(len(prompt)) * (1 + int64(p.PromptTopLogprobs) + ids) * logprobEntryBytes
		}
	}
	b.seqs += n
	b.bytes += int64(n) * (tokens*per + promptBytes)
}

// checkBatch refuses a request whose sequences or estimated response
// exceed MaxBatchSequences or MaxResponseBytes, naming the fields to lower.
func (s *Server) checkBatch(b batchBound, f batchFields) error {
	if b.seqs > s.lim.MaxBatchSequences {
		return badRequest(f.prompts, "the request runs %d sequences (%s times %s); at most %d are taken in one request (--max-batch-sequences)",
			b.seqs, f.prompts, f.n, s.lim.MaxBatchSequences)
	}
	if b.bytes > s.lim.MaxResponseBytes {
		return badRequest(f.maxTokens, "the response could reach about %d bytes (%d sequences of up to %s tokens, with 1 + %s logprob entries per token when logprobs are asked); at most %d bytes are answered (--max-response-bytes): lower %s, %s, %s or the number of %s",
			b.bytes, b.seqs, f.maxTokens, f.topLogprobs, s.lim.MaxResponseBytes, f.maxTokens, f.topLogprobs, f.n, f.prompts)
	}
	return nil
}
