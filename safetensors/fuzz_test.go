package safetensors

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzParseHeader feeds arbitrary whole files (length prefix, header and
// data) through the same checks Open applies. It must never panic, and an
// accepted header must describe tensors that tile the data exactly.
// The seed corpus lives in testdata/fuzz/FuzzParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), int64(8))
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"a":{"dtype":"U8","shape":[],"data_offsets":[8,9]}}`), int64(9))
	f.Add([]byte(`{}`), int64(0))
	f.Fuzz(func(t *testing.T, hdr []byte, dataSize int64) {
		if dataSize < 0 || dataSize > 1<<40 {
			return
		}
		// The same prefix checks Open makes.
		if _, err := headerEnd("fuzz", uint64(len(hdr)), 8+int64(len(hdr))+dataSize); err != nil {
			return
		}
		h, err := parseHeader("fuzz", hdr, 8+int64(len(hdr)), dataSize)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) || se.File != "fuzz" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		pos := 8 + int64(len(hdr))
		for _, ti := range h.tensors {
			if ti.Offset != pos || ti.Size < 0 || ti.Size != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted bad layout: %+v at %d", ti, pos)
			}
			pos += ti.Size
		}
		if pos != 8+int64(len(hdr))+dataSize {
			t.Fatalf("accepted header covering %d of %d", pos, dataSize)
		}
	})
}

// TestHeaderEndNoAlloc checks that an absurd claimed length is refused from
// the 8-byte prefix alone.
func TestHeaderEndNoAlloc(t *testing.T) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1<<62)
	if _, err := headerEnd("x", binary.LittleEndian.Uint64(b[:]), 1<<63-1); err == nil {
		t.Fatal("no error")
	}
}
