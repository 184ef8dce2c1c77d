package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Limits on untrusted tokenizer.json files. The largest real ones (262k
// tokens, 515k merges) are about 35 MB.
const (
	maxFileSize = 512 << 20
	maxTokens   = 4 << 20
	maxMerges   = 8 << 20
)

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// typed is the "type" field every component object carries.
type typed struct {
	Type string `json:"type"`
}

// LoadFile reads a tokenizer.json file.
func LoadFile(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("tokenizer: %s: larger than %d bytes", path, maxFileSize)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json file.
// It supports byte-level BPE as Qwen and DeepSeek models use it and
// reports anything else (another model type, normalizer, split regex or
// decoder) as an error that names the field, rather than tokenizing
// differently from Hugging Face.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if f.Model == nil {
		return nil, errors.New("model: missing")
	}
	t := &Tokenizer{bl: newByteLevel(), cache: newWordCache()}
	if err := t.parseModel(f.Model); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	// The post-processor only matters when special tokens are added
	// around a sequence (add_special_tokens=True); Encode never does that,
	// like Hugging Face's encode(text, add_special_tokens=False).
	if err := t.addAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) parseModel(m *modelJSON) error {
	if m.Type != "BPE" && m.Type != "" {
		return fmt.Errorf("type %q is not supported (only BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("dropout %v is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if m.ByteFallback {
		return errors.New("byte_fallback is not supported (byte-level BPE needs none)")
	}
	if len(m.Vocab) == 0 || string(m.Vocab) == "null" {
		return errors.New("vocab: missing")
	}
	vocab, ok := fastVocab(m.Vocab)
	if !ok {
		if err := json.Unmarshal(m.Vocab, &vocab); err != nil {
			return fmt.Errorf("vocab: want an object of token: id: %w", err)
		}
	}
	if len(vocab) > maxTokens {
		return fmt.Errorf("vocab: %d tokens, more than %d", len(vocab), maxTokens)
	}
	maxID := int64(-1)
	for tok, id := range vocab {
		if id < 0 || id >= maxTokens {
			return fmt.Errorf("vocab: token %q has id %d, outside [0, %d)", tok, id, maxTokens)
		}
		maxID = max(maxID, id)
	}
	if maxID >= 2*int64(len(vocab))+1024 {
		return fmt.Errorf("vocab: ids are sparse (%d tokens, largest id %d)", len(vocab), maxID)
	}
	t.vocab = make(map[string]int32, len(vocab))
	t.grow(int(maxID) + 1)
	for tok, id := range vocab {
		if t.present[id] {
			other := t.tokens[id]
			a, b := min(tok, other), max(tok, other)
			return fmt.Errorf("vocab: tokens %q and %q share id %d", a, b, id)
		}
		t.vocab[tok] = int32(id)
		t.setToken(int32(id), tok)
	}
	// Byte-level BPE must be able to spell every byte, or bytes would be
	// lost silently.
	for b := 0; b < 256; b++ {
		s := string(t.bl.toRune[b])
		id, ok := t.vocab[s]
		if !ok {
			return fmt.Errorf("vocab: no token for byte 0x%02x (%q); a byte-level vocabulary needs all 256", b, s)
		}
		t.model.byteIDs[b] = id
	}
	if m.IgnoreMerges {
		t.model.ignoreMerges = true
		t.model.wordIDs = make(map[string]int32, len(vocab))
		for tok, id := range t.vocab {
			if raw, ok := t.bl.decode(tok); ok {
				t.model.wordIDs[string(raw)] = id
			}
		}
	}
	return t.parseMerges(m.Merges)
}

func (t *Tokenizer) parseMerges(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("merges: missing")
	}
	pairs, ok := fastMerges(raw)
	if !ok {
		pairs = nil
		if err := json.Unmarshal(raw, &pairs); err != nil {
			var lines []string
			if err2 := json.Unmarshal(raw, &lines); err2 != nil {
				return fmt.Errorf("merges: want an array of [left, right] pairs or \"left right\" strings: %w", err)
			}
			pairs = make([][]string, len(lines))
			for i, l := range lines {
				pairs[i] = strings.Split(l, " ")
			}
		}
	}
	if len(pairs) > maxMerges {
		return fmt.Errorf("merges: %d rules, more than %d", len(pairs), maxMerges)
	}
	t.model.merges = newMergeTable(len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return fmt.Errorf("merges[%d]: want 2 tokens, got %d", i, len(p))
		}
		a, ok := t.vocab[p[0]]
		if !ok {
			return fmt.Errorf("merges[%d]: token %q is not in the vocabulary", i, p[0])
		}
		b, ok := t.vocab[p[1]]
		if !ok {
			return fmt.Errorf("merges[%d]: token %q is not in the vocabulary", i, p[1])
		}
		id, ok := t.vocab[p[0]+p[1]]
		if !ok {
			return fmt.Errorf("merges[%d]: merged token %q is not in the vocabulary", i, p[0]+p[1])
		}
		// A repeated rule takes its last rank, as in Hugging Face.
		t.model.merges.put(pairKey(a, b), merge{rank: int32(i), id: id})
	}
	return nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		typed
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return err
	}
	switch n.Type {
	case "NFC":
		t.nfc = true
		return nil
	case "Sequence":
		for i, sub := range n.Normalizers {
			if err := t.parseNormalizer(sub); err != nil {
				return fmt.Errorf("normalizers[%d]: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("type %q is not supported (only NFC)", n.Type)
}

type byteLevelJSON struct {
	typed
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
}

// parsePreTokenizer accepts a Sequence of one or more Split rules with
// known patterns (behavior Isolated, invert false) followed by ByteLevel
// without its own regex or prefix space.
func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("missing (want a Sequence of Split with known regexes, then ByteLevel)")
	}
	var seq struct {
		typed
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return err
	}
	if seq.Type != "Sequence" {
		return fmt.Errorf("type %q is not supported (want a Sequence of Split and ByteLevel)", seq.Type)
	}
	n := len(seq.Pretokenizers)
	if n < 2 {
		return fmt.Errorf("pretokenizers: %d entries (want one or more Split, then ByteLevel)", n)
	}
	t.splits = make([]splitRule, 0, n-1)
	for i, sub := range seq.Pretokenizers[:n-1] {
		sp, err := parseSplit(sub)
		if err != nil {
			return fmt.Errorf("pretokenizers[%d]: %w", i, err)
		}
		t.splits = append(t.splits, sp)
	}
	var bl byteLevelJSON
	if err := json.Unmarshal(seq.Pretokenizers[n-1], &bl); err != nil {
		return fmt.Errorf("pretokenizers[%d]: %w", n-1, err)
	}
	if bl.Type != "ByteLevel" {
		return fmt.Errorf("pretokenizers[%d]: type %q is not supported (want ByteLevel last)", n-1, bl.Type)
	}
	if bl.AddPrefixSpace || bl.UseRegex == nil || *bl.UseRegex {
		return fmt.Errorf("pretokenizers[%d]: ByteLevel with add_prefix_space or use_regex is not supported", n-1)
	}
	return nil
}

// parseSplit reads one Split pre-tokenizer.
func parseSplit(raw json.RawMessage) (splitRule, error) {
	var split struct {
		typed
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(raw, &split); err != nil {
		return nil, err
	}
	if split.Type != "Split" {
		return nil, fmt.Errorf("type %q is not supported (want Split; ByteLevel only last)", split.Type)
	}
	if split.Pattern.Regex == nil {
		return nil, errors.New("pattern: want a Regex")
	}
	if split.Behavior != "Isolated" || split.Invert {
		return nil, fmt.Errorf("behavior %q, invert %v is not supported (want Isolated, false)", split.Behavior, split.Invert)
	}
	return newSplitter(*split.Pattern.Regex)
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("missing (want ByteLevel)")
	}
	var d typed
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("type %q is not supported (want ByteLevel)", d.Type)
	}
	return nil
}

func (t *Tokenizer) addAddedTokens(list []AddedToken) error {
	t.addedIDs = make(map[string]int32, len(list))
	var raw, normalized []*AddedToken
	for i := range list {
		tok := &list[i]
		if tok.Content == "" {
			return fmt.Errorf("added_tokens[%d]: empty content", i)
		}
		if tok.ID < 0 || tok.ID >= maxTokens {
			return fmt.Errorf("added_tokens[%d] %q: id %d outside [0, %d)", i, tok.Content, tok.ID, maxTokens)
		}
		if int(tok.ID) >= len(t.present)+len(list)+1024 {
			return fmt.Errorf("added_tokens[%d] %q: id %d is far beyond the vocabulary (%d tokens)", i, tok.Content, tok.ID, len(t.present))
		}
		if id, dup := t.addedIDs[tok.Content]; dup {
			if id == tok.ID {
				continue // listed twice: Hugging Face ignores the repeat
			}
			return fmt.Errorf("added_tokens[%d]: %q is listed with ids %d and %d", i, tok.Content, id, tok.ID)
		}
		t.addedIDs[tok.Content] = tok.ID
		if int(tok.ID) >= len(t.present) {
			t.grow(int(tok.ID) + 1)
		}
		t.setToken(tok.ID, tok.Content)
		t.special[tok.ID] = tok.Special
		t.added = append(t.added, *tok)
		if tok.Normalized {
			normalized = append(normalized, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	if len(raw) > 0 {
		t.rawAdded = newAddedMatcher(raw, func(a *AddedToken) string { return a.Content })
	}
	if len(normalized) > 0 {
		t.normAdded = newAddedMatcher(normalized, func(a *AddedToken) string { return t.normalize(a.Content) })
	}
	return nil
}

// grow extends the per-id tables to n ids.
func (t *Tokenizer) grow(n int) {
	if n > cap(t.present) {
		c := n + n/8
		t.present = slices.Grow(t.present, c-len(t.present))
		t.special = slices.Grow(t.special, c-len(t.special))
		t.tokens = slices.Grow(t.tokens, c-len(t.tokens))
		t.pieces = slices.Grow(t.pieces, c-len(t.pieces))
	}
	for len(t.present) < n {
		t.present = append(t.present, false)
		t.special = append(t.special, false)
		t.tokens = append(t.tokens, "")
		t.pieces = append(t.pieces, nil)
	}
}

// setToken records the string of id and the bytes it decodes to, by the
// rule of Hugging Face's ByteLevel decoder: the byte-level mapping when
// every character has one, else the string's own UTF-8.
func (t *Tokenizer) setToken(id int32, s string) {
	t.present[id] = true
	t.tokens[id] = s
	if b, ok := t.bl.decode(s); ok {
		t.pieces[id] = b
	} else {
		t.pieces[id] = []byte(s)
	}
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}
