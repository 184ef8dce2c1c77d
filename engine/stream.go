package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// Stream delivers one sequence's tokens from the scheduler to the request's
// goroutine. The scheduler never blocks on it: tokens pile up until read.
type Stream struct {
	mu        sync.Mutex
	tokens    []Token
	prompt    promptLogprobs // prompt logprobs, delivered once
	promptSet bool
	finish    *Finish
	notify    chan struct{} // capacity 1: "something changed"

	cancelled atomic.Bool
	wake      func() // wakes the scheduler after Cancel
	stopWatch func() bool
}

func newStream(wake func()) *Stream {
	return &Stream{notify: make(chan struct{}, 1), wake: wake}
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Stream) push(t Token) {
	s.mu.Lock()
	s.tokens = append(s.tokens, t)
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) pushPrompt(lp promptLogprobs) {
	s.mu.Lock()
	s.prompt = lp
	s.promptSet = true
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) end(f Finish) {
	s.mu.Lock()
	if s.finish == nil {
		s.finish = &f
	}
	s.mu.Unlock()
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.signal()
}

// Cancel asks the scheduler to stop the sequence and free everything it
// holds; it returns at once. The stream then ends with FinishAbort unless
// it had already finished. Cancel is safe to call more than once and from
// any goroutine.
func (s *Stream) Cancel() {
	if s.cancelled.CompareAndSwap(false, true) {
		s.wake()
	}
}

// Update is what Next returns: the tokens produced since the last call, the
// prompt logprobs (once, when asked for) and the finish (once, last).
type Update struct {
	Tokens []Token
	// PromptLogprobs[j] is the log probability of prompt token j+1.
	PromptLogprobs []TokenLogprob
	// PromptTop[j] are the SamplingParams.PromptTopLogprobs most likely
	// tokens at prompt position j+1, best first (nil unless asked for).
	PromptTop [][]TokenLogprob
	// PromptIDs[j] are the SamplingParams.TokenIDsLogprob tokens at prompt
	// position j+1 (nil unless asked for).
	PromptIDs [][]TokenLogprob
	Finish    *Finish
}

// promptLogprobs is what a sequence collects of its prompt: Update's
// PromptLogprobs, PromptTop and PromptIDs.
type promptLogprobs struct {
	lp  []TokenLogprob
	top [][]TokenLogprob
	ids [][]TokenLogprob
}

// Next waits until the sequence produced tokens or finished, and returns
// everything new. After it has returned a Finish, it returns an empty
// Update with Finish set again. It returns ctx's error if ctx ends first.
func (s *Stream) Next(ctx context.Context) (Update, error) {
	for {
		s.mu.Lock()
		u := Update{Tokens: s.tokens, Finish: s.finish}
		if s.promptSet {
			u.PromptLogprobs, u.PromptTop, u.PromptIDs = s.prompt.lp, s.prompt.top, s.prompt.ids
			s.prompt, s.promptSet = promptLogprobs{}, false
		}
		s.tokens = nil
		s.mu.Unlock()
		if len(u.Tokens) > 0 || u.Finish != nil || u.PromptLogprobs != nil {
			return u, nil
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Update{}, ctx.Err()
		}
	}
}
