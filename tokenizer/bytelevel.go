package tokenizer

// byteLevel is GPT-2's reversible byte-to-character table, which byte-level
// BPE vocabularies are written in: printable Latin-1 bytes map to themselves
// and the others (controls, space, 0x7F-0xA0, 0xAD) to U+0100 and up, in order.
type byteLevel struct {
	toRune [256]rune
	toByte [324]int16 // rune -> byte, -1 where the rune is not in the table
}

func newByteLevel() *byteLevel {
	bl := &byteLevel{}
	for i := range bl.toByte {
		bl.toByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			bl.toRune[b] = rune(b)
		} else {
			bl.toRune[b] = 256 + n
			n++
		}
		bl.toByte[bl.toRune[b]] = int16(b)
	}
	return bl
}

// decode maps a byte-level string back to bytes. ok is false when some
// character is outside the table; Hugging Face then keeps the token's own
// UTF-8 bytes, and so does the caller.
func (bl *byteLevel) decode(s string) (b []byte, ok bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(bl.toByte) || bl.toByte[r] < 0 {
			return nil, false
		}
		out = append(out, byte(bl.toByte[r]))
	}
	return out, true
}

// encode maps bytes to their byte-level string.
func (bl *byteLevel) encode(b []byte) string {
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = bl.toRune[c]
	}
	return string(rs)
}
