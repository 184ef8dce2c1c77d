package tokenizer

// StreamDecoder turns ids into text one at a time for streaming. Each call
// returns only whole UTF-8 characters: bytes of a character split across
// tokens are held until it is complete. The concatenation of everything it
// returns, Flush included, equals Decode (or DecodeSkipSpecial) of all the
// ids. A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	out         []byte
}

// NewStreamDecoder returns a decoder that skips special tokens when
// skipSpecial is set.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add decodes one more id and returns the text it completes, possibly "".
func (d *StreamDecoder) Add(id int32) string {
	d.pending = d.t.appendPiece(d.pending, id, d.skipSpecial)
	return d.emit(false)
}

// Flush returns what is held back (an unfinished character becomes
// U+FFFD) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	return d.emit(true)
}

// Pending reports how many bytes are held back waiting for the rest of a
// character.
func (d *StreamDecoder) Pending() int { return len(d.pending) }

func (d *StreamDecoder) emit(final bool) string {
	if len(d.pending) == 0 {
		return ""
	}
	var n int
	d.out, n = appendLossy(d.out[:0], d.pending, final)
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return string(d.out)
}
