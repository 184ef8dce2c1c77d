// Package pyjson writes JSON strings byte for byte as Python's json module
// does (json.dumps), for the places where kt must reproduce Python output
// exactly: Jinja's tojson in chat templates and PEFT adapter configs.
package pyjson

import (
	"fmt"
	"io"
	"unicode/utf16"
)

// Writer is what WriteString writes to (*strings.Builder, *bytes.Buffer).
type Writer interface {
	io.Writer
	WriteByte(c byte) error
	WriteString(s string) (int, error)
	WriteRune(r rune) (int, error)
}

// WriteString writes s quoted as json.dumps does: \" \\ \n \r \t \b \f,
// other control characters as \u00XX, and with ensureASCII everything
// outside printable ASCII (DEL included) as \uXXXX, astral characters as a
// UTF-16 surrogate pair. Invalid UTF-8 is written as U+FFFD.
func WriteString(b Writer, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
