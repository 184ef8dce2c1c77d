package server

import (
	"encoding/json"
	"math"
)

// samplingFields are the sampling parameters shared by the OpenAI routes,
// with SGLang's extensions (top_k, min_p, repetition_penalty, ...).
type samplingFields struct {
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	Seed                *int64          `json:"seed"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           *int            `json:"min_tokens"`
	Stop                json.RawMessage `json:"stop"`
	StopTokenIDs        []int32         `json:"stop_token_ids"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	SkipSpecialTokens   *bool           `json:"skip_special_tokens"`
	NoStopTrim          bool            `json:"no_stop_trim"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User string `json:"user"`
	RID  string `json:"rid"`
	// SGLang's constrained decoding extensions.
	Regex string `json:"regex"`
	EBNF  string `json:"ebnf"`
	// logit_bias (OpenAI), stop_regex and the custom logit processor
	// fields (SGLang), read by toParams and parseStopRegex.
	LogitBias            json.RawMessage `json:"logit_bias"`
	StopRegex            json.RawMessage `json:"stop_regex"`
	CustomLogitProcessor json.RawMessage `json:"custom_logit_processor"`
	CustomParams         json.RawMessage `json:"custom_params"`
}

type chatRequest struct {
	Model    string            `json:"model"`
	Messages []json.RawMessage `json:"messages"`
	samplingFields
	Logprobs           bool              `json:"logprobs"`
	TopLogprobs        *int              `json:"top_logprobs"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	ResponseFormat     *responseFormat   `json:"response_format"`
	ChatTemplateKwargs json.RawMessage   `json:"chat_template_kwargs"`
	SeparateReasoning  *bool             `json:"separate_reasoning"`
	ContinueFinalMsg   bool              `json:"continue_final_message"`
	ReasoningEffort    string            `json:"reasoning_effort"`
}

type toolDef struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
	raw        json.RawMessage // the whole object (structural_tag reads it)
}

type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	samplingFields
	Logprobs *int `json:"logprobs"`
	Echo     bool `json:"echo"`
	// SGLang's constrained decoding on /v1/completions.
	JSONSchema     json.RawMessage `json:"json_schema"`
	ResponseFormat *responseFormat `json:"response_format"`
	Suffix         string          `json:"suffix"`
	BestOf         *int            `json:"best_of"`
}

// Responses.

type usage struct {
	PromptTokens        int  `json:"prompt_tokens"`
	TotalTokens         int  `json:"total_tokens"`
	CompletionTokens    int  `json:"completion_tokens"`
	PromptTokensDetails *any `json:"prompt_tokens_details"`
	ReasoningTokens     int  `json:"reasoning_tokens"`
	cached              int  // prompt tokens served from the prefix cache
}

// total fills TotalTokens and, when the server reports the cache
// (--enable-cache-report, as SGLang), prompt_tokens_details.
func (u *usage) total(report bool) {
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if report {
		var d any = map[string]int{"cached_tokens": u.cached}
		u.PromptTokensDetails = &d
	}
}

type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatMessageOut struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content"`
	ToolCalls        []toolCall `json:"tool_calls"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatMessageOut  `json:"message"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop"`
}

type chatResponse struct {
	ID       string       `json:"id"`
	Object   string       `json:"object"`
	Created  int64        `json:"created"`
	Model    string       `json:"model"`
	Choices  []chatChoice `json:"choices"`
	Usage    *usage       `json:"usage"`
	Metadata metadata     `json:"metadata"`
}

type metadata struct {
	WeightVersion string `json:"weight_version"`
}

type chatDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        chatDelta       `json:"delta"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type completionChoice struct {
	Index        int                `json:"index"`
	Text         string             `json:"text"`
	Logprobs     *completionLogprob `json:"logprobs"`
	FinishReason *string            `json:"finish_reason"`
	MatchedStop  json.RawMessage    `json:"matched_stop"`
}

type completionLogprob struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage"`
}

// finiteLogprob maps -Inf and NaN (impossible tokens) to -9999, as OpenAI
// does, so the JSON stays valid.
func finiteLogprob(v float32) float64 {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) || f < -9999 {
		return -9999
	}
	return f
}

func bytesOf(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func strPtr(s string) *string { return &s }
