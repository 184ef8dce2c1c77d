package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/chattemplate"
	"github.com/ktserve/kt/tokenizer"
)

func init() { addCommand(newTokenizeCmd) }

func newTokenizeCmd() *cobra.Command {
	var (
		dir                 string
		decode, skipSpecial bool
		ordinary, jsonOut   bool
		showTokens          bool
		chatFile            string
	)
	cmd := &cobra.Command{
		Use:   "tokenize [TEXT...]",
		Short: "Encode text to token ids (or decode ids) with a model's tokenizer",
		Long: `Encode text to token ids with DIR/tokenizer.json, as Hugging Face's
encode(text, add_special_tokens=False) does, or with Kimi-K2's
DIR/tiktoken.model as its tokenization_kimi.py does. The text comes from the
arguments (joined by spaces) or from stdin.

  --decode      read ids (space, comma or JSON array separated) and print the text
  --chat FILE   render a conversation {messages, tools, add_generation_prompt,
                chat_template_kwargs} with the model's chat template, then tokenize it
  --tokens      print one "id<TAB>token" line per token`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errors.New("--tokenizer-path is required")
			}
			tok, err := tokenizer.Load(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var prompt string
			switch {
			case chatFile != "":
				if len(args) > 0 || decode {
					return errors.New("--chat takes no text and no --decode")
				}
				tmpl, err := chattemplate.Load(dir)
				if err != nil {
					return err
				}
				data, err := os.ReadFile(chatFile)
				if err != nil {
					return err
				}
				var conv chattemplate.Conversation
				if err := json.Unmarshal(data, &conv); err != nil {
					return fmt.Errorf("%s: %w", chatFile, err)
				}
				if prompt, err = tmpl.Render(conv); err != nil {
					return fmt.Errorf("%s: %w", chatFile, err)
				}
			case len(args) > 0:
				prompt = strings.Join(args, " ")
			default:
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<30))
				if err != nil {
					return err
				}
				prompt = string(data)
			}
			if decode {
				ids, err := parseIDs(prompt)
				if err != nil {
					return err
				}
				text := tok.Decode(ids)
				if skipSpecial {
					text = tok.DecodeSkipSpecial(ids)
				}
				if jsonOut {
					return json.NewEncoder(out).Encode(map[string]any{"text": text})
				}
				_, err = fmt.Fprintln(out, text)
				return err
			}
			var ids []int32
			if ordinary {
				ids = tok.EncodeOrdinary(prompt)
			} else {
				ids = tok.Encode(prompt)
			}
			switch {
			case jsonOut:
				res := map[string]any{"ids": ids}
				if chatFile != "" {
					res["prompt"] = prompt
				}
				return json.NewEncoder(out).Encode(res)
			case showTokens:
				for _, id := range ids {
					b, _ := tok.TokenBytes(id)
					fmt.Fprintf(out, "%d\t%q\n", id, b)
				}
				return nil
			}
			if chatFile != "" {
				fmt.Fprintf(out, "%s\n---\n", prompt)
			}
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = strconv.Itoa(int(id))
			}
			_, err = fmt.Fprintln(out, strings.Join(s, " "))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "tokenizer-path", "", "model or tokenizer directory (tokenizer.json, tokenizer_config.json)")
	f.BoolVar(&decode, "decode", false, "decode ids to text")
	f.BoolVar(&skipSpecial, "skip-special-tokens", false, "with --decode, leave special tokens out")
	f.BoolVar(&ordinary, "split-special-tokens", false, "treat special tokens in the text as plain text")
	f.StringVar(&chatFile, "chat", "", "render this conversation JSON with the chat template and tokenize it")
	f.BoolVar(&jsonOut, "json", false, "print JSON")
	f.BoolVar(&showTokens, "tokens", false, "print each id with its token bytes")
	return cmd
}

// parseIDs reads ids separated by spaces, commas or newlines, with or
// without JSON brackets.
func parseIDs(s string) ([]int32, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == '[' || r == ']' || r == ' ' || r == '\n' || r == '\t' || r == '\r'
	})
	ids := make([]int32, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("not a token id: %q", f)
		}
		ids = append(ids, int32(n))
	}
	return ids, nil
}
