package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// File is an open, memory-mapped safetensors file. Its tensors' Data slices
// alias the mapping and must not be used after Close. A File is safe for
// concurrent reads.
type File struct {
	path     string
	data     []byte // the whole file, mmapped read-only
	tensors  []TensorInfo
	index    map[string]int
	metadata map[string]string
}

// Open maps the safetensors file at path and validates its header. The file
// must not be truncated or rewritten while it is open: the kernel would
// deliver SIGBUS on access to the missing pages.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, errf(path, "", "not a regular file")
	}
	size := st.Size()
	if size < 8 {
		return nil, errf(path, "", "file is %d bytes, too short for the 8-byte header length", size)
	}
	var prefix [8]byte
	if _, err := f.ReadAt(prefix[:], 0); err != nil {
		return nil, errf(path, "", "reading header length: %v", err)
	}
	base, err := headerEnd(path, binary.LittleEndian.Uint64(prefix[:]), size)
	if err != nil {
		return nil, err
	}
	if int64(int(size)) != size {
		return nil, errf(path, "", "file of %d bytes too large to map", size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, errf(path, "", "mmap: %v", err)
	}
	h, err := parseHeader(path, data[8:base], base, size-base)
	if err != nil {
		_ = unix.Munmap(data)
		return nil, err
	}
	return newFile(path, data, h), nil
}

// headerEnd checks the claimed header length n against the cap and the file
// size and returns the file offset where the data section starts.
func headerEnd(path string, n uint64, size int64) (int64, error) {
	if n > MaxHeaderSize {
		return 0, errf(path, "", "header length %d exceeds the %d-byte limit (corrupt or not a safetensors file)", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return 0, errf(path, "", "header length %d runs past the end of the %d-byte file (truncated?)", n, size)
	}
	if n < 2 {
		return 0, errf(path, "", "header length %d is too short for a JSON object", n)
	}
	return 8 + int64(n), nil
}

func newFile(path string, data []byte, h *header) *File {
	f := &File{path: path, data: data, tensors: h.tensors, metadata: h.metadata, index: make(map[string]int, len(h.tensors))}
	for i, t := range h.tensors {
		f.index[t.Name] = i
	}
	return f
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Close unmaps the file. Tensor data obtained from it must not be used
// afterwards.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	err := unix.Munmap(f.data)
	f.data = nil
	if err != nil {
		return fmt.Errorf("safetensors %s: munmap: %w", f.path, err)
	}
	return nil
}

// Tensors returns the descriptions of all tensors in the order their data
// appears in the file. The slice is shared: do not modify it.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Metadata returns the header's __metadata__ map (empty if absent). The map
// is shared: do not modify it.
func (f *File) Metadata() map[string]string { return f.metadata }

// Info returns the description of the named tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// ErrNotFound is wrapped by errors for tensors a file or checkpoint lacks.
var ErrNotFound = errors.New("tensor not found")

// ErrClosed is returned when a tensor is requested from a closed file.
var ErrClosed = errors.New("file is closed")

// Tensor returns a zero-copy view of the named tensor.
func (f *File) Tensor(name string) (Tensor, error) {
	i, ok := f.index[name]
	if !ok {
		return Tensor{}, &Error{File: f.path, Tensor: name, Err: ErrNotFound}
	}
	if f.data == nil {
		return Tensor{}, &Error{File: f.path, Tensor: name, Err: ErrClosed}
	}
	ti := f.tensors[i]
	return Tensor{TensorInfo: ti, Data: f.data[ti.Offset : ti.Offset+ti.Size : ti.Offset+ti.Size]}, nil
}
