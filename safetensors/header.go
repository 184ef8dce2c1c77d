package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"

	"github.com/ktserve/kt/tensor"
)

// MaxHeaderSize caps the JSON header length a file may claim (100 MiB, as
// the reference implementation does). Larger claims are rejected before
// anything is allocated.
const MaxHeaderSize = 100 << 20

// MaxRank caps the number of dimensions a tensor may declare.
const MaxRank = 16

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType tensor.DType
	Shape []int64
	// Offset is the byte offset of the tensor's data from the start of the
	// file (not of the data section), and Size its length in bytes.
	Offset, Size int64
}

// NumElements returns the number of elements of the tensor.
func (ti TensorInfo) NumElements() int64 {
	n, _ := tensor.NumElements(ti.Shape) // validated when the header was parsed
	return n
}

// Error is a problem with a safetensors file: File names it and Tensor,
// when not empty, the tensor concerned.
type Error struct {
	File   string
	Tensor string
	Err    error
}

func (e *Error) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors %s: tensor %q: %v", e.File, e.Tensor, e.Err)
	}
	return fmt.Sprintf("safetensors %s: %v", e.File, e.Err)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

func errf(file, tensorName, format string, args ...any) error {
	return &Error{File: file, Tensor: tensorName, Err: fmt.Errorf(format, args...)}
}

// rawEntry is one tensor entry as it appears in the header JSON.
type rawEntry struct {
	DType       *string       `json:"dtype"`
	Shape       []json.Number `json:"shape"`
	DataOffsets []json.Number `json:"data_offsets"`
}

// header is a parsed and validated safetensors header.
type header struct {
	tensors  []TensorInfo // sorted by offset
	metadata map[string]string
}

// parseHeader parses and validates the JSON header hdr of file (named for
// errors) whose data section, following the 8-byte length prefix and the
// header, is dataSize bytes long. base is the file offset of the data
// section; TensorInfo offsets are base-relative-to-file.
func parseHeader(file string, hdr []byte, base, dataSize int64) (*header, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, errf(file, "", "header is not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errf(file, "", "header is not a JSON object (starts with %v)", tok)
	}
	h := &header{metadata: map[string]string{}}
	seen := map[string]bool{}
	sawMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errf(file, "", "header is not valid JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errf(file, "", "header key is not a string: %v", tok)
		}
		if name == metadataKey {
			if sawMeta {
				return nil, errf(file, "", "duplicate %s", metadataKey)
			}
			sawMeta = true
			var meta map[string]json.RawMessage
			if err := dec.Decode(&meta); err != nil {
				return nil, errf(file, "", "%s is not an object: %v", metadataKey, err)
			}
			for k, v := range meta {
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					return nil, errf(file, "", "%s[%q] is not a string", metadataKey, k)
				}
				h.metadata[k] = s
			}
			continue
		}
		if seen[name] {
			return nil, errf(file, name, "duplicate tensor name")
		}
		seen[name] = true
		if name == "" {
			return nil, errf(file, name, "empty tensor name")
		}
		var raw rawEntry
		if err := dec.Decode(&raw); err != nil {
			return nil, errf(file, name, "bad entry: %v", err)
		}
		ti, err := checkEntry(name, &raw, base, dataSize)
		if err != nil {
			return nil, &Error{File: file, Tensor: name, Err: err}
		}
		h.tensors = append(h.tensors, ti)
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, errf(file, "", "header is not valid JSON: %v", err)
	}
	// Anything but whitespace after the object is an error (the writer pads
	// with spaces).
	rest, _ := io.ReadAll(dec.Buffered())
	for _, b := range rest {
		if b != ' ' && b != '\t' && b != '\n' && b != '\r' && b != 0 {
			return nil, errf(file, "", "trailing bytes after header JSON")
		}
	}
	if err := checkLayout(file, h.tensors, base, dataSize); err != nil {
		return nil, err
	}
	return h, nil
}

// checkEntry validates one header entry in isolation.
func checkEntry(name string, raw *rawEntry, base, dataSize int64) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	if raw.DType == nil {
		return ti, errors.New("missing dtype")
	}
	dt, err := tensor.ParseDType(*raw.DType)
	if err != nil {
		return ti, err
	}
	ti.DType = dt
	if raw.Shape == nil {
		return ti, errors.New("missing shape")
	}
	if len(raw.Shape) > MaxRank {
		return ti, fmt.Errorf("shape has %d dimensions, more than %d", len(raw.Shape), MaxRank)
	}
	ti.Shape = make([]int64, len(raw.Shape))
	for i, n := range raw.Shape {
		d, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || d < 0 {
			return ti, fmt.Errorf("shape[%d] = %s is not a non-negative integer", i, n)
		}
		ti.Shape[i] = d
	}
	numel, err := tensor.NumElements(ti.Shape)
	if err != nil {
		return ti, err
	}
	if numel > math.MaxInt64/int64(dt.Size()) {
		return ti, fmt.Errorf("shape %v of %s overflows", ti.Shape, dt)
	}
	want := numel * int64(dt.Size())
	if len(raw.DataOffsets) != 2 {
		return ti, fmt.Errorf("data_offsets must have 2 entries, has %d", len(raw.DataOffsets))
	}
	var off [2]int64
	for i, n := range raw.DataOffsets {
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v < 0 {
			return ti, fmt.Errorf("data_offsets[%d] = %s is not a non-negative integer", i, n)
		}
		off[i] = v
	}
	if off[1] < off[0] {
		return ti, fmt.Errorf("data_offsets [%d, %d] end before they begin", off[0], off[1])
	}
	if off[1] > dataSize {
		return ti, fmt.Errorf("data_offsets [%d, %d] run past the end of the data (%d bytes; file truncated?)", off[0], off[1], dataSize)
	}
	if got := off[1] - off[0]; got != want {
		return ti, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d", ti.Shape, dt, want, off[0], off[1], got)
	}
	ti.Offset = base + off[0]
	ti.Size = want
	return ti, nil
}

// checkLayout sorts tensors by offset and checks that they tile the data
// section exactly: no overlap, no gap, nothing past or short of the end.
func checkLayout(file string, ts []TensorInfo, base, dataSize int64) error {
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Offset != ts[j].Offset {
			return ts[i].Offset < ts[j].Offset
		}
		return ts[i].Size < ts[j].Size
	})
	pos := base
	for i, t := range ts {
		switch {
		case t.Offset < pos:
			return errf(file, t.Name, "data [%d, %d) overlaps tensor %q", t.Offset-base, t.Offset-base+t.Size, ts[i-1].Name)
		case t.Offset > pos:
			return errf(file, t.Name, "gap of %d bytes before its data at %d (offsets must be contiguous)", t.Offset-pos, t.Offset-base)
		}
		pos += t.Size
	}
	if end := base + dataSize; pos != end {
		return errf(file, "", "tensors cover %d bytes of data but the file holds %d after the header", pos-base, dataSize)
	}
	return nil
}
