// Package tokenizer encodes and decodes text with a Hugging Face
// tokenizer.json of the byte-level BPE kind Qwen (Qwen2 to Qwen3.5) and
// DeepSeek (V3, R1) models use, giving the same ids as Hugging Face's
// tokenizers library, and Kimi-K2's tiktoken.model (its
// tokenization_kimi.py class), giving the same ids as tiktoken.
//
// Encoding runs the same pipeline: added and special tokens are matched
// first (leftmost-longest), the rest is NFC-normalized if the file says
// so, split by the model's regexes in turn (hand-written scanners
// equivalent to the Oniguruma patterns, lookahead included), mapped to
// bytes and merged by rank. A tiktoken vocabulary is loaded into the same
// form: its ranks become merge rules, and its special tokens added tokens.
// Decoding maps ids back to bytes; StreamDecoder does it incrementally for
// streaming without ever splitting a UTF-8 character.
//
// A Tokenizer is immutable after Load and safe for concurrent use.
package tokenizer

import (
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded tokenizer.json or tiktoken.model.
type Tokenizer struct {
	bl    *byteLevel
	model bpe
	// splits are the pre-tokenizer's Split rules in order, each applied
	// to the pieces the one before left.
	splits []splitRule
	nfc    bool
	// tiktoken marks a tokenizer loaded from tiktoken.model: encoding
	// follows tokenization_kimi.py (see encodeTiktoken).
	tiktoken bool

	added     []AddedToken
	addedIDs  map[string]int32 // content -> id
	rawAdded  *addedMatcher    // tokens matched in the raw text (normalized=false)
	normAdded *addedMatcher    // tokens matched after normalization

	vocab   map[string]int32 // model token (byte-level form) -> id
	present []bool           // per id: a token exists
	special []bool           // per id: a special added token
	tokens  []string         // per id: the token as written in tokenizer.json
	pieces  [][]byte         // per id: the bytes it decodes to

	cache *wordCache
}

// Encode returns the ids of text as Hugging Face's
// encode(text, add_special_tokens=False) does: added tokens in the text,
// special ones included, become their ids. Invalid UTF-8 is first replaced
// by U+FFFD (maximal subparts), as any Hugging Face caller would see it.
// A tiktoken tokenizer encodes as tokenization_kimi.py's encode(text).
func (t *Tokenizer) Encode(text string) []int32 {
	return t.encode(nil, text, false)
}

// EncodeOrdinary is Encode with special tokens treated as plain text
// (Hugging Face's split_special_tokens=True), for untrusted text that must
// not inject control tokens. Non-special added tokens still match, except
// in a tiktoken tokenizer, where no added token does (Kimi-K2's
// encode(allow_special_tokens=False)).
func (t *Tokenizer) EncodeOrdinary(text string) []int32 {
	return t.encode(nil, text, true)
}

// AppendEncode is Encode appending to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	return t.encode(dst, text, false)
}

func (t *Tokenizer) encode(dst []int32, text string, skipSpecial bool) []int32 {
	text = validString(text)
	if t.tiktoken {
		return t.encodeTiktoken(dst, text, skipSpecial)
	}
	if t.rawAdded == nil {
		return t.encodeNormalized(dst, text, skipSpecial)
	}
	t.rawAdded.split(text, skipSpecial, func(part string, tok *AddedToken) {
		if tok != nil {
			dst = append(dst, tok.ID)
		} else {
			dst = t.encodeNormalized(dst, part, skipSpecial)
		}
	})
	return dst
}

func (t *Tokenizer) normalize(s string) string {
	if t.nfc {
		return norm.NFC.String(s)
	}
	return s
}

// encodeNormalized normalizes a run of text between raw added tokens,
// matches the normalized added tokens in it and tokenizes the rest.
func (t *Tokenizer) encodeNormalized(dst []int32, s string, skipSpecial bool) []int32 {
	s = t.normalize(s)
	if t.normAdded == nil {
		return t.encodeText(dst, s)
	}
	t.normAdded.split(s, skipSpecial, func(part string, tok *AddedToken) {
		if tok != nil {
			dst = append(dst, tok.ID)
		} else {
			dst = t.encodeText(dst, part)
		}
	})
	return dst
}

// encodeText pre-tokenizes s and runs BPE on each piece.
func (t *Tokenizer) encodeText(dst []int32, s string) []int32 {
	return t.encodeSplit(dst, s, 0)
}

// encodeSplit splits s by rule k and the pieces by the rules after it,
// then runs BPE on each final piece.
func (t *Tokenizer) encodeSplit(dst []int32, s string, k int) []int32 {
	if k == len(t.splits) {
		return t.encodeWord(dst, s)
	}
	sp := t.splits[k]
	for i := 0; i < len(s); {
		j := sp.next(s, i)
		dst = t.encodeSplit(dst, s[i:j], k+1)
		i = j
	}
	return dst
}

func (t *Tokenizer) encodeWord(dst []int32, w string) []int32 {
	if len(w) == 1 {
		return append(dst, t.model.byteIDs[w[0]])
	}
	if len(w) > cacheMaxWord {
		return t.model.encodeWord(dst, w)
	}
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.model.encodeWord(dst, w)
	t.cache.put(strings.Clone(w), slices.Clone(dst[n:]))
	return dst
}

// Decode returns the text of ids as Hugging Face's
// decode(ids, skip_special_tokens=False) does: the bytes of every token,
// with ill-formed UTF-8 replaced by U+FFFD. Ids without a token are
// skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	return string(t.decode(ids, false))
}

// DecodeSkipSpecial is Decode without the special tokens
// (skip_special_tokens=True).
func (t *Tokenizer) DecodeSkipSpecial(ids []int32) string {
	return string(t.decode(ids, true))
}

func (t *Tokenizer) decode(ids []int32, skipSpecial bool) []byte {
	var raw []byte
	for _, id := range ids {
		raw = t.appendPiece(raw, id, skipSpecial)
	}
	out, _ := appendLossy(make([]byte, 0, len(raw)), raw, true)
	return out
}

func (t *Tokenizer) appendPiece(dst []byte, id int32, skipSpecial bool) []byte {
	if id < 0 || int(id) >= len(t.present) || !t.present[id] || (skipSpecial && t.special[id]) {
		return dst
	}
	return append(dst, t.pieces[id]...)
}

// TokenBytes returns the raw bytes token id stands for (possibly a partial
// UTF-8 sequence), for logprob displays. The slice must not be modified.
func (t *Tokenizer) TokenBytes(id int32) ([]byte, bool) {
	if id < 0 || int(id) >= len(t.present) || !t.present[id] {
		return nil, false
	}
	p := t.pieces[id]
	return p[:len(p):len(p)], true
}

// TokenString returns token id as tokenizer.json writes it (byte-level
// form for model tokens, e.g. "Ġhello"; the content for added tokens).
func (t *Tokenizer) TokenString(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.present) || !t.present[id] {
		return "", false
	}
	return t.tokens[id], true
}

// TokenID returns the id of an added token's content (e.g. "<|im_end|>")
// or of a model token in its tokenizer.json form, like Hugging Face's
// token_to_id.
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.addedIDs[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// VocabSize returns one more than the largest id with a token. The model's
// embedding table may be larger (padded); those ids decode to nothing.
func (t *Tokenizer) VocabSize() int { return len(t.present) }

// AddedTokens returns the added tokens in file order.
func (t *Tokenizer) AddedTokens() []AddedToken { return slices.Clone(t.added) }
