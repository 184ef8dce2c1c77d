// Package jinja is a Jinja2 template engine for chat templates. It follows
// Python Jinja2 as Hugging Face transformers configures it for
// apply_chat_template (trim_blocks and lstrip_blocks on, autoescape off,
// loop controls, a sandbox that cannot mutate lists or dicts), with
// Python's value semantics: insertion-ordered dicts, True/None printing,
// json.dumps-compatible tojson, Python string methods.
//
// Templates are untrusted input. They cannot reach the file system
// (include, import and extends are refused) and rendering is bounded in
// output size, the size of every value built and of all of them together,
// steps, call depth and time; the clock is read every few dozen steps and
// before work that grows with the size of a value.
package jinja

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Error is a template syntax or rendering error.
type Error struct {
	Line int // 1-based line of the template, 0 if unknown
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// ErrRaised is wrapped by the error of a template that called
// raise_exception(message); the error text is the message.
var ErrRaised = errors.New("template raised an exception")

type raisedError struct{ msg string }

func (e *raisedError) Error() string { return e.msg }
func (e *raisedError) Unwrap() error { return ErrRaised }

// Limits bound the work of one Render call.
type Limits struct {
	MaxOutput    int           // bytes of output (and of any one string)
	MaxSteps     int           // loop iterations, calls and output statements
	MaxItems     int           // items of any one list or dict
	MaxBuilt     int           // bytes of all values built (an item counts itemBytes)
	MaxCallDepth int           // nested macro calls
	Timeout      time.Duration // wall time, 0 for none
}

// DefaultLimits are generous for chat templates, which render in
// microseconds, and small enough that a hostile one fails fast.
var DefaultLimits = Limits{
	MaxOutput:    16 << 20,
	MaxSteps:     5_000_000,
	MaxItems:     1_000_000,
	MaxBuilt:     256 << 20,
	MaxCallDepth: 100,
	Timeout:      5 * time.Second,
}

// MaxSourceSize is the largest template source Parse accepts.
const MaxSourceSize = 1 << 20

// Template is a parsed template; it is immutable and safe for concurrent
// use.
type Template struct {
	body []node
}

// Parse parses a template source with Hugging Face's settings
// (trim_blocks, lstrip_blocks, one trailing newline dropped).
func Parse(src string) (*Template, error) {
	if len(src) > MaxSourceSize {
		return nil, fmt.Errorf("template is %d bytes, more than %d", len(src), MaxSourceSize)
	}
	toks, err := lex(normalizeNewlines(src), lexOptions{trimBlocks: true, lstripBlocks: true})
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Options are the settings of one Render call.
type Options struct {
	Limits Limits           // zero fields take DefaultLimits'
	Now    func() time.Time // for strftime_now; time.Now if nil
}

// Render renders the template with the given variables.
func (t *Template) Render(ctx context.Context, vars map[string]Value, opts Options) (string, error) {
	lim := opts.Limits
	def := DefaultLimits
	if lim.MaxOutput <= 0 {
		lim.MaxOutput = def.MaxOutput
	}
	if lim.MaxSteps <= 0 {
		lim.MaxSteps = def.MaxSteps
	}
	if lim.MaxItems <= 0 {
		lim.MaxItems = def.MaxItems
	}
	if lim.MaxBuilt <= 0 {
		lim.MaxBuilt = def.MaxBuilt
	}
	if lim.MaxCallDepth <= 0 {
		lim.MaxCallDepth = def.MaxCallDepth
	}
	if lim.Timeout == 0 {
		lim.Timeout = def.Timeout
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if lim.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, lim.Timeout)
		defer cancel()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var out strings.Builder
	r := &renderer{ctx: ctx, limits: lim, now: now, out: &out}
	top := newScope(nil)
	for k, v := range vars {
		top.vars[k] = v
	}
	if err := r.execBody(t.body, top); err != nil {
		return "", err
	}
	return out.String(), nil
}
