package tokenizer

import "unicode/utf8"

// seqLen reports how many leading bytes of b form the maximal subpart of a
// UTF-8 sequence (Unicode §3.9, Table 3-7): n bytes that are a well-formed
// sequence (complete true) or the longest prefix of one (complete false).
// n is 0 when b[0] cannot start a sequence at all. A truncated prefix that
// reaches the end of b is reported with atEnd true: more bytes might
// complete it.
func seqLen(b []byte) (n int, complete, atEnd bool) {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c < 0x80:
		return 1, true, false
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 0, false, false
	}
	n = 1
	for k := 0; k < need; k++ {
		if n >= len(b) {
			return n, false, true
		}
		x := b[n]
		if k == 0 {
			if x < lo || x > hi {
				return n, false, false
			}
		} else if x < 0x80 || x > 0xBF {
			return n, false, false
		}
		n++
	}
	return n, true, false
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// subpart of an ill-formed sequence with U+FFFD, exactly like Rust's
// String::from_utf8_lossy, WHATWG's decoder and Python's errors="replace".
// When final is false, a truncated sequence at the very end is left
// unconsumed (it may be completed by later bytes); consumed says how many
// bytes of b were used.
func appendLossy(dst, b []byte, final bool) (out []byte, consumed int) {
	i := 0
	for i < len(b) {
		// Fast path over ASCII.
		j := i
		for j < len(b) && b[j] < utf8.RuneSelf {
			j++
		}
		dst = append(dst, b[i:j]...)
		i = j
		if i >= len(b) {
			break
		}
		n, complete, atEnd := seqLen(b[i:])
		switch {
		case complete:
			dst = append(dst, b[i:i+n]...)
			i += n
		case atEnd && !final:
			return dst, i
		default:
			dst = append(dst, "\uFFFD"...)
			if n == 0 {
				n = 1
			}
			i += n
		}
	}
	return dst, i
}

// validString returns s unchanged when it is valid UTF-8, or its lossy
// conversion.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out, _ := appendLossy(nil, []byte(s), true)
	return string(out)
}
