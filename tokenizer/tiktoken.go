package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The files of a tiktoken tokenizer directory (Kimi-K2).
const (
	// TiktokenFile is the vocabulary: one "<base64 of the token's bytes>
	// <rank>" line per token, the rank being the token's id.
	TiktokenFile = "tiktoken.model"
	// kimiTokenizerPy is the Python class Kimi-K2 ships with it.
	kimiTokenizerPy = "tokenization_kimi.py"
	// kimiSpecialCount is the number of special-token ids after the
	// vocabulary: num_reserved_special_tokens (256) + 2.
	kimiSpecialCount = 258
	// kimiMaxChars and kimiMaxRun are tokenization_kimi.py's encode
	// limits: the text is encoded in windows of TIKTOKEN_MAX_ENCODE_CHARS
	// characters, each cut so that no piece has more than
	// MAX_NO_WHITESPACES_CHARS consecutive whitespace or non-whitespace
	// characters.
	kimiMaxChars = 400_000
	kimiMaxRun   = 25_000
)

// FileIn returns the name of the tokenizer file Load reads in dir:
// tokenizer.json, else tiktoken.model; "" when dir has neither.
func FileIn(dir string) string {
	for _, f := range []string{"tokenizer.json", TiktokenFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return f
		}
	}
	return ""
}

// Load reads the tokenizer in dir: tokenizer.json when there is one (Qwen,
// DeepSeek), else tiktoken.model with tokenizer_config.json (Kimi-K2; see
// LoadTiktoken).
func Load(dir string) (*Tokenizer, error) {
	switch FileIn(dir) {
	case TiktokenFile:
		return LoadTiktoken(dir)
	case "":
		return nil, fmt.Errorf("tokenizer: %s has neither tokenizer.json nor %s: %w", dir, TiktokenFile, fs.ErrNotExist)
	}
	return LoadFile(filepath.Join(dir, "tokenizer.json"))
}

// LoadTiktoken reads a tiktoken tokenizer directory as Kimi-K2 ships it:
// tiktoken.model (the ranks), tokenizer_config.json (the special-token
// names, in added_tokens_decoder) and tokenization_kimi.py (the Python
// class, whose split pattern is the one this package implements). It
// encodes as that class's encode does: tiktoken with every special token
// allowed. Only Kimi-K2's class is supported: the directory must have
// tokenization_kimi.py or a tokenizer_config.json whose auto_map names it.
//
// The 256 + 2 ids after the vocabulary are the special tokens, named by
// added_tokens_decoder or <|reserved_token_ID|>. All of them match in
// Encode and none in EncodeOrdinary; IsSpecial (and so DecodeSkipSpecial)
// is true for the ones transformers skips: the bos, eos, unk and pad tokens
// and additional_special_tokens.
func LoadTiktoken(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, TiktokenFile)
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	ranks, err := parseTiktokenRanks(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgData, err := readLimited(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("%w (a tiktoken tokenizer needs it for its special tokens)", err)
	}
	var cfg tiktokenConfig
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	if err := checkKimiClass(dir, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	t, err := newTiktoken(ranks, &cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	return t, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxFileSize {
		return nil, fmt.Errorf("tokenizer: %s: larger than %d bytes", path, maxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("tokenizer: %s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// parseTiktokenRanks reads tiktoken.model as tiktoken's load_tiktoken_bpe
// does, and checks what tiktoken leaves to chance: every token once, the
// ranks exactly 0 to n-1, and all 256 single bytes present.
func parseTiktokenRanks(data []byte) ([][]byte, error) {
	var tokens [][]byte
	var rankOf []int
	seen := map[string]int{} // token -> rank
	for lineNo := 1; len(data) > 0; lineNo++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			continue
		}
		f := bytes.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"<base64 token> <rank>\", got %d fields", lineNo, len(f))
		}
		tok, err := base64.StdEncoding.DecodeString(string(f[0]))
		if err != nil || len(tok) == 0 {
			return nil, fmt.Errorf("line %d: token %.40q is not base64 of one or more bytes", lineNo, f[0])
		}
		rank, err := strconv.Atoi(string(f[1]))
		if err != nil || rank < 0 || rank >= maxTokens {
			return nil, fmt.Errorf("line %d: rank %.40q is not an integer in [0, %d)", lineNo, f[1], maxTokens)
		}
		if prev, dup := seen[string(tok)]; dup {
			return nil, fmt.Errorf("line %d: token %q is listed again (first with rank %d)", lineNo, tok, prev)
		}
		if len(tokens) == maxTokens {
			return nil, fmt.Errorf("more than %d tokens", maxTokens)
		}
		seen[string(tok)] = rank
		tokens, rankOf = append(tokens, tok), append(rankOf, rank)
	}
	// Place every token at its rank; the ranks must be 0..n-1.
	byRank := make([][]byte, len(tokens))
	for i, tok := range tokens {
		rank := rankOf[i]
		if rank >= len(tokens) {
			return nil, fmt.Errorf("token %q has rank %d: the ranks of %d tokens must be 0 to %d", tok, rank, len(tokens), len(tokens)-1)
		}
		if byRank[rank] != nil {
			return nil, fmt.Errorf("tokens %q and %q share rank %d", byRank[rank], tok, rank)
		}
		byRank[rank] = tok
	}
	for b := 0; b < 256; b++ {
		if _, ok := seen[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("no token for byte 0x%02x; byte-pair encoding needs all 256", b)
		}
	}
	return byRank, nil
}

// tiktokenConfig is the part of tokenizer_config.json a tiktoken
// tokenizer reads.
type tiktokenConfig struct {
	AddedTokensDecoder map[string]struct {
		Content string `json:"content"`
	} `json:"added_tokens_decoder"`
	BOS                     tokenName       `json:"bos_token"`
	EOS                     tokenName       `json:"eos_token"`
	UNK                     tokenName       `json:"unk_token"`
	PAD                     tokenName       `json:"pad_token"`
	AdditionalSpecialTokens *[]tokenName    `json:"additional_special_tokens"`
	AutoMap                 json.RawMessage `json:"auto_map"`
}

// tokenName is a special token in tokenizer_config.json: a string, an
// AddedToken object with its content, or null.
type tokenName struct {
	set     bool
	content string
}

func (n *tokenName) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		n.set = true
		return json.Unmarshal(b, &n.content)
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("want a string or an object with content: %w", err)
	}
	if o.Content == nil {
		return errors.New("token object without content")
	}
	n.set, n.content = true, *o.Content
	return nil
}

// kimiDefaultSpecial is tokenization_kimi.py's additional_special_tokens
// when tokenizer_config.json gives none.
var kimiDefaultSpecial = []string{"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
	"<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"}

// kimiReservedRe finds tokenization_kimi.py's reserved-token count.
var kimiReservedRe = regexp.MustCompile(`num_reserved_special_tokens\s*=\s*(\d+)`)

// checkKimiClass checks that the directory's tokenizer is Kimi-K2's
// tokenization_kimi class: auto_map names it or the file is there, and the
// file, when there, has Kimi-K2's pattern and 256 reserved tokens.
func checkKimiClass(dir string, cfg *tiktokenConfig) error {
	named := false
	var am struct {
		AutoTokenizer json.RawMessage `json:"AutoTokenizer"`
	}
	if len(cfg.AutoMap) > 0 && json.Unmarshal(cfg.AutoMap, &am) == nil {
		var one string
		var list []*string
		switch {
		case json.Unmarshal(am.AutoTokenizer, &one) == nil:
			named = strings.HasPrefix(one, "tokenization_kimi.")
		case json.Unmarshal(am.AutoTokenizer, &list) == nil:
			for _, s := range list {
				named = named || (s != nil && strings.HasPrefix(*s, "tokenization_kimi."))
			}
		}
	}
	py, err := os.ReadFile(filepath.Join(dir, kimiTokenizerPy))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !named {
			return fmt.Errorf("only Kimi-K2's tiktoken tokenizer is supported, and neither does tokenizer_config.json's auto_map name a tokenization_kimi class nor is there a %s", kimiTokenizerPy)
		}
		return nil
	case err != nil:
		return err
	}
	for _, alt := range kimiPatternAlts {
		if !bytes.Contains(py, []byte(alt)) {
			return fmt.Errorf("%s does not have Kimi-K2's split pattern (it lacks %q); only that pattern is supported", kimiTokenizerPy, alt)
		}
	}
	if m := kimiReservedRe.FindSubmatch(py); m == nil || string(m[1]) != strconv.Itoa(kimiSpecialCount-2) {
		return fmt.Errorf("%s does not set num_reserved_special_tokens = %d as Kimi-K2's does", kimiTokenizerPy, kimiSpecialCount-2)
	}
	return nil
}

// newTiktoken builds the tokenizer from the ranks and the config. The model
// tokens are kept in their byte-level form (what the Python class's
// decoder holds), a word that is a whole token is that token, and the merge
// table is derived from the ranks: every split of a token into two tokens
// merges to it at its rank. Merging the lowest-ranked adjacent pair, the
// leftmost on ties, is then exactly tiktoken's byte-pair rule, under which
// the pair whose concatenation has the lowest rank merges first.
func newTiktoken(ranks [][]byte, cfg *tiktokenConfig) (*Tokenizer, error) {
	n := len(ranks)
	t := &Tokenizer{bl: newByteLevel(), cache: newWordCache(), tiktoken: true}
	t.vocab = make(map[string]int32, n)
	t.model.ignoreMerges = true
	t.model.wordIDs = make(map[string]int32, n)
	t.grow(n + kimiSpecialCount)
	for id, tok := range ranks {
		s := t.bl.encode(tok)
		t.vocab[s] = int32(id)
		t.present[id], t.tokens[id], t.pieces[id] = true, s, tok
		t.model.wordIDs[string(tok)] = int32(id)
		if len(tok) == 1 {
			t.model.byteIDs[tok[0]] = int32(id)
		}
	}
	type pairMerge struct {
		key uint64
		merge
	}
	var merges []pairMerge
	for id, tok := range ranks {
		for k := 1; k < len(tok); k++ {
			a, ok := t.model.wordIDs[string(tok[:k])]
			if !ok {
				continue
			}
			if b, ok := t.model.wordIDs[string(tok[k:])]; ok {
				merges = append(merges, pairMerge{pairKey(a, b), merge{rank: int32(id), id: int32(id)}})
			}
		}
	}
	t.model.merges = newMergeTable(len(merges))
	for _, m := range merges {
		t.model.merges.put(m.key, m.merge)
	}
	t.splits = []splitRule{newKimiSplitter()}

	names := make(map[int]string, len(cfg.AddedTokensDecoder))
	for k, v := range cfg.AddedTokensDecoder {
		id, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("added_tokens_decoder: key %q is not a token id", k)
		}
		if id < n || id >= n+kimiSpecialCount {
			return nil, fmt.Errorf("added_tokens_decoder: id %d (%q) is outside the special-token ids [%d, %d) after the %d ranks of %s",
				id, v.Content, n, n+kimiSpecialCount, n, TiktokenFile)
		}
		names[id] = v.Content
	}
	skipped := map[string]bool{}
	for _, f := range []struct {
		field string
		name  tokenName
		def   string
	}{{"bos_token", cfg.BOS, "[BOS]"}, {"eos_token", cfg.EOS, "[EOS]"}, {"unk_token", cfg.UNK, ""}, {"pad_token", cfg.PAD, ""}} {
		switch {
		case f.name.set:
			skipped[f.name.content] = true
		case f.def != "":
			skipped[f.def] = true
		}
	}
	if cfg.AdditionalSpecialTokens != nil {
		for _, e := range *cfg.AdditionalSpecialTokens {
			skipped[e.content] = true
		}
	}
	added := make([]AddedToken, kimiSpecialCount)
	for i := range added {
		id := n + i
		name, ok := names[id]
		if !ok {
			name = "<|reserved_token_" + strconv.Itoa(id) + "|>"
		}
		// Without additional_special_tokens in the config, the Python
		// class's default list applies.
		special := skipped[name] || (cfg.AdditionalSpecialTokens == nil && slices.Contains(kimiDefaultSpecial, name))
		added[i] = AddedToken{ID: int32(id), Content: name, Special: special}
		delete(skipped, name)
	}
	if err := t.addAddedTokens(added); err != nil {
		return nil, fmt.Errorf("added_tokens_decoder: %w", err)
	}
	for name := range skipped {
		return nil, fmt.Errorf("special token %q (bos, eos, unk, pad or additional_special_tokens) is none of the %d special tokens", name, kimiSpecialCount)
	}
	return t, nil
}

// encodeTiktoken is encode for a tiktoken tokenizer: the text cut as
// tokenization_kimi.py's encode cuts it, then each part encoded with the
// special tokens (Encode) or with none (EncodeOrdinary).
func (t *Tokenizer) encodeTiktoken(dst []int32, text string, ordinary bool) []int32 {
	kimiChunks(text, func(part string) {
		if ordinary {
			dst = t.encodeText(dst, part)
			return
		}
		t.rawAdded.split(part, false, func(p string, tok *AddedToken) {
			if tok != nil {
				dst = append(dst, tok.ID)
			} else {
				dst = t.encodeText(dst, p)
			}
		})
	})
	return dst
}

// kimiChunks calls fn with the parts tokenization_kimi.py encodes one by
// one: windows of kimiMaxChars characters, each cut before any character
// that would make a run of whitespace or of non-whitespace characters
// (Python's str.isspace) longer than kimiMaxRun.
func kimiChunks(s string, fn func(string)) {
	if len(s) <= kimiMaxRun { // no run can be longer
		fn(s)
		return
	}
	start, count := 0, 0
	for i := range s {
		if count == kimiMaxChars {
			kimiCutRuns(s[start:i], fn)
			start, count = i, 0
		}
		count++
	}
	kimiCutRuns(s[start:], fn)
}

func kimiCutRuns(s string, fn func(string)) {
	if len(s) <= kimiMaxRun {
		fn(s)
		return
	}
	r, _ := utf8.DecodeRuneInString(s)
	start, run, space := 0, 0, pyIsSpace(r)
	for i, r := range s {
		if sp := pyIsSpace(r); sp != space {
			run, space = 1, sp
			continue
		}
		if run++; run > kimiMaxRun {
			fn(s[start:i])
			start, run = i, 1
		}
	}
	fn(s[start:])
}

// pyIsSpace is Python's str.isspace for one character: White_Space and
// the information separators U+001C to U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}
