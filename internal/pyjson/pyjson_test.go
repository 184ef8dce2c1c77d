package pyjson

import (
	"bytes"
	"strings"
	"testing"
)

// The wants are Python 3's json.dumps(s) and json.dumps(s, ensure_ascii=False)
// (the last case: invalid UTF-8, which Go reads as U+FFFD).
func TestWriteString(t *testing.T) {
	for _, c := range []struct{ in, ascii, raw string }{
		{"", `""`, `""`},
		{`a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`},
		{"\n\r\t\b\f\x01\x1f", `"\n\r\t\b\f\u0001\u001f"`, `"\n\r\t\b\f\u0001\u001f"`},
		{"~\x7f", `"~\u007f"`, "\"~\x7f\""},
		{"é你好", `"\u00e9\u4f60\u597d"`, `"é你好"`},
		{"😀", `"\ud83d\ude00"`, `"😀"`},
		{"\xff", `"\ufffd"`, "\"\uFFFD\""},
	} {
		var sb strings.Builder
		WriteString(&sb, c.in, true)
		if sb.String() != c.ascii {
			t.Errorf("%q ensure_ascii: %s, want %s", c.in, sb.String(), c.ascii)
		}
		var bb bytes.Buffer
		WriteString(&bb, c.in, false)
		if bb.String() != c.raw {
			t.Errorf("%q: %s, want %s", c.in, bb.String(), c.raw)
		}
	}
}
