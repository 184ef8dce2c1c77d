package constraint

import "unicode/utf8"

// byteRange is an inclusive range of byte values.
type byteRange struct{ lo, hi byte }

// utf8Sequences calls emit with the byte-range sequences whose
// concatenations are exactly the UTF-8 encodings of the runes in [lo, hi]
// (surrogates excluded): the rune-to-byte split of RE2 and Rust's
// utf8-ranges.
func utf8Sequences(lo, hi rune, emit func([]byteRange)) {
	if lo < 0 {
		lo = 0
	}
	if hi > utf8.MaxRune {
		hi = utf8.MaxRune
	}
	if lo > hi {
		return
	}
	// Surrogates have no UTF-8 encoding.
	if lo < 0xD800 && hi > 0xDFFF {
		utf8Sequences(lo, 0xD7FF, emit)
		utf8Sequences(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return
	}
	// Split where the encoded length changes.
	for _, b := range [...]rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			utf8Sequences(lo, b, emit)
			utf8Sequences(b+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byteRange{{byte(lo), byte(hi)}})
		return
	}
	// Split until every continuation byte spans a full or aligned range.
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, hi&^m-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range n {
		seq[i] = byteRange{a[i], b[i]}
	}
	emit(seq)
}
