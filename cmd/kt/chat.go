package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/internal/settings"
)

func init() { addCommand(newChatCmd) }

type chatOptions struct {
	host        string
	port        int
	url         string
	apiKey      string
	model       string
	system      string
	temperature float64
	maxTokens   int
	noStream    bool
	historyFile string
	noThinking  bool
	color       bool
}

func newChatCmd() *cobra.Command {
	var o chatOptions
	c := &cobra.Command{
		Use:   "chat",
		Short: "Chat with a running kt serve (or any OpenAI-compatible server) in the terminal",
		Long: `chat is a terminal chat with a running server. Answers stream as they are
generated; a reasoning model's thinking is shown apart from its answer.
The conversation is kept and can be saved.

Commands: /clear (forget the conversation), /retry (answer the last message
again), /history (show the conversation), /save [FILE] (write it as JSON),
/help, /quit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && cmd.OutOrStdout() == os.Stdout {
				o.color = true
			}
			return runChat(cmd.Context(), &o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.host, "host", "127.0.0.1", "server host")
	fl.IntVar(&o.port, "port", 30000, "server port")
	fl.StringVar(&o.url, "url", "", "server base URL (overrides --host and --port), e.g. http://10.0.0.2:30000")
	fl.StringVar(&o.apiKey, "api-key", settings.APIKey.Get(), "API key of the server (default $KT_API_KEY)")
	fl.StringVar(&o.model, "model", "", "model name (default: the server's first model)")
	fl.StringVar(&o.system, "system", "", "system prompt")
	fl.Float64Var(&o.temperature, "temperature", 0.7, "sampling temperature (0 = greedy)")
	fl.IntVar(&o.maxTokens, "max-tokens", 1024, "most tokens per answer")
	fl.BoolVar(&o.noStream, "no-stream", false, "wait for whole answers instead of streaming")
	fl.StringVar(&o.historyFile, "history-file", "", "save the conversation to this JSON file after every turn")
	fl.BoolVar(&o.noThinking, "no-thinking", false, "ask the model not to think (chat_template_kwargs enable_thinking=false)")
	return c
}

type chatMsg struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

type chatSession struct {
	o       *chatOptions
	base    string
	out     io.Writer
	history []chatMsg
	client  *http.Client
}

func runChat(ctx context.Context, o *chatOptions, in io.Reader, out io.Writer) error {
	base := o.url
	if base == "" {
		base = fmt.Sprintf("http://%s:%d", o.host, o.port)
	}
	s := &chatSession{o: o, base: strings.TrimSuffix(base, "/"), out: out, client: &http.Client{}}
	if o.model == "" {
		m, err := s.firstModel(ctx)
		if err != nil {
			return fmt.Errorf("chat: %w (is kt serve running at %s?)", err, s.base)
		}
		o.model = m
	}
	s.reset()
	fmt.Fprintf(out, "Chatting with %s at %s. /help lists commands; /quit or Ctrl-D leaves.\n", o.model, s.base)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for {
		fmt.Fprint(out, s.style("1", ">>> "))
		if !sc.Scan() {
			fmt.Fprintln(out)
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			quit, err := s.command(ctx, line)
			if err != nil {
				fmt.Fprintln(out, "error:", err)
			}
			if quit {
				return nil
			}
			continue
		}
		s.history = append(s.history, chatMsg{Role: "user", Content: line})
		s.turn(ctx)
	}
}

func (s *chatSession) reset() {
	s.history = s.history[:0]
	if s.o.system != "" {
		s.history = append(s.history, chatMsg{Role: "system", Content: s.o.system})
	}
}

func (s *chatSession) style(code, text string) string {
	if !s.o.color {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (s *chatSession) command(ctx context.Context, line string) (quit bool, err error) {
	cmd, arg, _ := strings.Cut(line, " ")
	switch cmd {
	case "/quit", "/exit", "/bye":
		return true, s.save("")
	case "/clear":
		s.reset()
		fmt.Fprintln(s.out, "(conversation cleared)")
	case "/retry":
		if len(s.history) > 0 && s.history[len(s.history)-1].Role == "assistant" {
			s.history = s.history[:len(s.history)-1]
		}
		if len(s.history) == 0 || s.history[len(s.history)-1].Role != "user" {
			return false, errors.New("nothing to retry")
		}
		s.turn(ctx)
	case "/history":
		for _, m := range s.history {
			if m.ReasoningContent != "" {
				fmt.Fprintf(s.out, "[%s thinking] %s\n", m.Role, m.ReasoningContent)
			}
			fmt.Fprintf(s.out, "[%s] %s\n", m.Role, m.Content)
		}
	case "/save":
		path := strings.TrimSpace(arg)
		if path == "" && s.o.historyFile == "" {
			return false, errors.New("/save FILE, or start with --history-file")
		}
		if err := s.save(path); err != nil {
			return false, err
		}
		if path == "" {
			path = s.o.historyFile
		}
		fmt.Fprintf(s.out, "(saved %d messages to %s)\n", len(s.history), path)
	case "/help":
		fmt.Fprintln(s.out, "/clear  forget the conversation\n/retry  answer the last message again\n/history  show the conversation\n/save [FILE]  write the conversation as JSON\n/quit  leave")
	default:
		return false, fmt.Errorf("unknown command %s (/help lists them)", cmd)
	}
	return false, nil
}

// save writes the history as JSON to path (or --history-file).
func (s *chatSession) save(path string) error {
	if path == "" {
		path = s.o.historyFile
	}
	if path == "" {
		return nil
	}
	data, err := json.MarshalIndent(s.history, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("saving the history: %w", err)
	}
	return nil
}

// turn sends the conversation and prints the answer; on failure the
// unanswered user message stays for /retry.
func (s *chatSession) turn(ctx context.Context) {
	msg, err := s.ask(ctx)
	if err != nil {
		fmt.Fprintln(s.out, "\nerror:", err)
		return
	}
	s.history = append(s.history, msg)
	if err := s.save(""); err != nil {
		fmt.Fprintln(s.out, "error:", err)
	}
}

func (s *chatSession) request(stream bool) ([]byte, error) {
	body := map[string]any{"model": s.o.model, "messages": s.history, "temperature": s.o.temperature,
		"max_tokens": s.o.maxTokens, "stream": stream}
	if s.o.noThinking {
		body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
	}
	return json.Marshal(body)
}

func (s *chatSession) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", s.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.o.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.o.apiKey)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("server: %s (%d)", e.Error.Message, resp.StatusCode)
		}
		return nil, fmt.Errorf("server: %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	return resp, nil
}

func (s *chatSession) firstModel(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/models", nil)
	if s.o.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.o.apiKey)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != 200 {
		return "", fmt.Errorf("listing models: status %d", resp.StatusCode)
	}
	if len(l.Data) == 0 {
		return "", errors.New("the server lists no model")
	}
	return l.Data[0].ID, nil
}

// printer shows reasoning apart from the answer as it streams.
type printer struct {
	s        *chatSession
	thinking bool
	answered bool
}

func (p *printer) reasoning(text string) {
	if text == "" {
		return
	}
	if !p.thinking {
		fmt.Fprint(p.s.out, p.s.style("2", "[thinking] "))
		p.thinking = true
	}
	fmt.Fprint(p.s.out, p.s.style("2", text))
}

func (p *printer) content(text string) {
	if text == "" {
		return
	}
	if p.thinking && !p.answered {
		fmt.Fprint(p.s.out, "\n"+p.s.style("2", "[answer]")+"\n")
	}
	p.answered = true
	fmt.Fprint(p.s.out, text)
}

func (s *chatSession) ask(ctx context.Context) (chatMsg, error) {
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt) // Ctrl-C stops this answer
	defer cancel()
	body, err := s.request(!s.o.noStream)
	if err != nil {
		return chatMsg{}, err
	}
	resp, err := s.post(ctx, "/v1/chat/completions", body)
	if err != nil {
		return chatMsg{}, err
	}
	defer resp.Body.Close()
	p := &printer{s: s}
	var msg chatMsg
	msg.Role = "assistant"
	var finish string
	if s.o.noStream {
		var r struct {
			Choices []struct {
				Message struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) == 0 {
			return chatMsg{}, fmt.Errorf("reading the answer: %v", err)
		}
		c := r.Choices[0]
		if c.Message.ReasoningContent != nil {
			msg.ReasoningContent = *c.Message.ReasoningContent
		}
		if c.Message.Content != nil {
			msg.Content = *c.Message.Content
		}
		p.reasoning(msg.ReasoningContent)
		p.content(msg.Content)
		finish = c.FinishReason
	} else {
		var content, reasoning strings.Builder
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				if ctx.Err() != nil {
					fmt.Fprintln(s.out, s.style("2", " [stopped]"))
					break
				}
				return chatMsg{}, err
			}
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				break
			}
			var ch struct {
				Choices []struct {
					Delta struct {
						Content          string `json:"content"`
						ReasoningContent string `json:"reasoning_content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(data), &ch); err != nil {
				return chatMsg{}, fmt.Errorf("bad event from the server: %v", err)
			}
			if ch.Error != nil {
				return chatMsg{}, fmt.Errorf("server: %s", ch.Error.Message)
			}
			for _, c := range ch.Choices {
				p.reasoning(c.Delta.ReasoningContent)
				p.content(c.Delta.Content)
				reasoning.WriteString(c.Delta.ReasoningContent)
				content.WriteString(c.Delta.Content)
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
		}
		msg.Content, msg.ReasoningContent = content.String(), reasoning.String()
	}
	fmt.Fprintln(s.out)
	if finish == "length" {
		fmt.Fprintln(s.out, s.style("2", fmt.Sprintf("(cut at --max-tokens %d)", s.o.maxTokens)))
	}
	return msg, nil
}
