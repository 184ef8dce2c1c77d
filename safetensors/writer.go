package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/ktserve/kt/tensor"
)

// Spec declares one tensor to be written: its name, dtype and shape.
type Spec struct {
	Name  string
	DType tensor.DType
	Shape []int64
}

// Writer streams a safetensors file. All tensors are declared up front (the
// header holds their offsets); their bytes then follow in declaration order
// through Write, WriteTensor or WriteTensorFrom, in as many pieces as the
// caller likes. The file is written under a temporary name in the target
// directory and renamed into place by Close, so readers never see a partial
// file; Abort discards it. A Writer is not safe for concurrent use.
type Writer struct {
	path    string
	tmp     *os.File
	buf     *bufio.Writer
	specs   []TensorInfo // Offset relative to the data section
	byName  map[string]int
	total   int64 // data section size
	written int64 // data bytes written so far
	done    bool
	err     error // sticky write error
}

// Create starts writing a safetensors file at path with the given tensors
// (written in this order) and metadata (may be nil).
func Create(path string, specs []Spec, metadata map[string]string) (*Writer, error) {
	w := &Writer{path: path, byName: map[string]int{}}
	var off int64
	for _, s := range specs {
		if s.Name == "" || s.Name == metadataKey {
			return nil, errf(path, s.Name, "invalid tensor name")
		}
		if _, dup := w.byName[s.Name]; dup {
			return nil, errf(path, s.Name, "declared twice")
		}
		if s.DType.Size() == 0 {
			return nil, errf(path, s.Name, "invalid dtype %s", s.DType)
		}
		if len(s.Shape) > MaxRank {
			return nil, errf(path, s.Name, "shape has %d dimensions, more than %d", len(s.Shape), MaxRank)
		}
		n, err := tensor.NumElements(s.Shape)
		if err != nil {
			return nil, &Error{File: path, Tensor: s.Name, Err: err}
		}
		if n > (math.MaxInt64-off)/int64(s.DType.Size()) {
			return nil, errf(path, s.Name, "data size overflows")
		}
		size := n * int64(s.DType.Size())
		w.byName[s.Name] = len(w.specs)
		w.specs = append(w.specs, TensorInfo{Name: s.Name, DType: s.DType, Shape: append([]int64(nil), s.Shape...), Offset: off, Size: size})
		off += size
	}
	w.total = off
	hdr, err := encodeHeader(w.specs, metadata)
	if err != nil {
		return nil, errf(path, "", "%v", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	w.tmp = tmp
	w.buf = bufio.NewWriterSize(tmp, 1<<20)
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(hdr)))
	w.buf.Write(prefix[:])
	if _, err := w.buf.Write(hdr); err != nil {
		_ = w.Abort()
		return nil, fmt.Errorf("safetensors %s: writing header: %w", path, err)
	}
	return w, nil
}

// encodeHeader renders the header JSON: __metadata__ first, then tensors in
// declaration order, padded with spaces to a multiple of 8 bytes so the data
// section starts aligned.
func encodeHeader(specs []TensorInfo, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(`"` + metadataKey + `":{`)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(metadata[k])
			b.Write(kb)
			b.WriteByte(':')
			b.Write(vb)
		}
		b.WriteByte('}')
		first = false
	}
	for _, s := range specs {
		if !first {
			b.WriteByte(',')
		}
		first = false
		nb, _ := json.Marshal(s.Name)
		shape := s.Shape
		if shape == nil {
			shape = []int64{}
		}
		sb, _ := json.Marshal(shape)
		fmt.Fprintf(&b, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, nb, s.DType, sb, s.Offset, s.Offset+s.Size)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("header of %d bytes exceeds the %d-byte limit", b.Len(), MaxHeaderSize)
	}
	return b.Bytes(), nil
}

// next returns the index of the tensor whose bytes are due next, or
// len(specs) when all are written.
func (w *Writer) next() int {
	i := sort.Search(len(w.specs), func(i int) bool { return w.specs[i].Offset+w.specs[i].Size > w.written })
	return i
}

// Write appends raw data bytes, continuing the tensor in progress and
// running on into the following ones in declaration order. Writing more
// than the declared tensors hold is an error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, fmt.Errorf("safetensors %s: write after Close or Abort", w.path)
	}
	if int64(len(p)) > w.total-w.written {
		name := ""
		if len(w.specs) > 0 {
			name = w.specs[len(w.specs)-1].Name
		}
		return 0, errf(w.path, name, "writing %d bytes past the end of the declared data (%d left)", len(p), w.total-w.written)
	}
	n, err := w.buf.Write(p)
	w.written += int64(n)
	if err != nil {
		w.err = fmt.Errorf("safetensors %s: %w", w.path, err)
		return n, w.err
	}
	return n, nil
}

// expect checks that the next bytes due are the start of tensor name.
func (w *Writer) expect(name string) (TensorInfo, error) {
	j, ok := w.byName[name]
	if !ok {
		return TensorInfo{}, errf(w.path, name, "not declared")
	}
	s := w.specs[j]
	switch {
	case s.Offset < w.written:
		return s, errf(w.path, name, "already written")
	case s.Offset > w.written:
		due := w.specs[w.next()]
		if due.Offset < w.written {
			return s, errf(w.path, name, "out of order: tensor %q is partly written (%d of %d bytes)", due.Name, w.written-due.Offset, due.Size)
		}
		return s, errf(w.path, name, "out of order: tensor %q is due next", due.Name)
	}
	return s, nil
}

// WriteTensor writes the whole of tensor name, which must be the next one
// declared; len(data) must equal its declared size.
func (w *Writer) WriteTensor(name string, data []byte) error {
	s, err := w.expect(name)
	if err != nil {
		return err
	}
	if int64(len(data)) != s.Size {
		return errf(w.path, name, "got %d bytes, declared %s %v needs %d", len(data), s.DType, s.Shape, s.Size)
	}
	_, err = w.Write(data)
	return err
}

// WriteTensorFrom copies exactly the declared size of tensor name from r;
// name must be the next tensor declared. A short read is an error.
func (w *Writer) WriteTensorFrom(name string, r io.Reader) error {
	s, err := w.expect(name)
	if err != nil {
		return err
	}
	n, err := io.Copy(w, io.LimitReader(r, s.Size))
	if err != nil {
		return fmt.Errorf("safetensors %s: tensor %q: %w", w.path, name, err)
	}
	if n != s.Size {
		return errf(w.path, name, "reader gave %d bytes, declared size is %d", n, s.Size)
	}
	return nil
}

// Close checks that every declared byte was written, flushes and syncs the
// temporary file and renames it to the target path. If anything is missing
// or fails, the temporary file is removed and an error returned.
func (w *Writer) Close() error {
	if w.done {
		return nil
	}
	if w.err != nil {
		_ = w.Abort()
		return w.err
	}
	if w.written != w.total {
		i := w.next()
		err := errf(w.path, w.specs[i].Name, "incomplete: %d of %d data bytes written", w.written, w.total)
		_ = w.Abort()
		return err
	}
	err := w.buf.Flush()
	if err == nil {
		err = w.tmp.Sync()
	}
	if cerr := w.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.tmp.Name(), w.path)
	}
	w.done = true
	if err != nil {
		_ = os.Remove(w.tmp.Name())
		return fmt.Errorf("safetensors %s: %w", w.path, err)
	}
	return nil
}

// Abort discards the temporary file. It is safe to call after Close (it
// then does nothing).
func (w *Writer) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	err := w.tmp.Close()
	if rerr := os.Remove(w.tmp.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("safetensors %s: abort: %w", w.path, err)
	}
	return nil
}

// WriteFile writes a complete safetensors file from in-memory tensors, in
// the given order. Each Tensor's Data must match its DType and Shape.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	specs := make([]Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	w, err := Create(path, specs, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := w.WriteTensor(t.Name, t.Data); err != nil {
			_ = w.Abort()
			return err
		}
	}
	return w.Close()
}
