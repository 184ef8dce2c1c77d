// Package torchpt reads tensors from PyTorch's torch.save files (the zip
// format of torch >= 1.6: <dir>/data.pkl, a pickle whose storages are
// persistent ids naming <dir>/data/<key> records). It exists for SGLang's
// expert statistics (--init-expert-location FILE.pt). The pickle is decoded
// by gopickle, which maps globals to inert Go values and never runs code;
// this package opens the zip itself so that every storage's element count
// is checked against the bytes its record holds before anything is
// allocated, and it turns decoder panics on malformed input into errors.
package torchpt

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/pytorch"
	"github.com/nlpodyssey/gopickle/types"
)

// Limits on what a file may make this package read.
const (
	maxPickleBytes  = 64 << 20 // data.pkl
	maxStorageBytes = 4 << 30  // one storage record
	maxElems        = 1 << 27  // one tensor's elements (as float64: 1 GiB)
)

// Tensor is a dense tensor read from a file, its elements converted to
// float64 in row-major order.
type Tensor struct {
	Shape []int
	Data  []float64
}

// Load reads the object saved in the file at p. Tensors come back as
// *Tensor, dicts (also OrderedDict) as map[string]any with string keys,
// lists and tuples as []any, and numbers, strings, bools and None as Go
// int, float64, string, bool and nil.
func Load(p string) (any, error) {
	zr, err := zip.OpenReader(p)
	if err != nil {
		return nil, fmt.Errorf("torchpt: %s is not a torch.save zip file: %w", p, err)
	}
	defer zr.Close()
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("torchpt: %w", err)
	}
	v, err := load(&zr.Reader, st.Size())
	if err != nil {
		return nil, fmt.Errorf("torchpt: %s: %w", p, err)
	}
	return v, nil
}

// LoadReader is Load on a zip archive of size bytes read through r.
func LoadReader(r io.ReaderAt, size int64) (any, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("torchpt: not a torch.save zip file: %w", err)
	}
	return load(zr, size)
}

// load reads the archive zr of size bytes. Sizes in zip headers are not
// trusted: a record may not claim more bytes than the archive could hold
// (deflate expands at most 1032:1).
func load(zr *zip.Reader, size int64) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("malformed pickle (%v)", r)
		}
	}()
	records := map[string]*zip.File{}
	var pkl *zip.File
	for _, f := range zr.File {
		records[f.Name] = f
		if path.Base(f.Name) == "data.pkl" && (pkl == nil || len(f.Name) < len(pkl.Name)) {
			pkl = f
		}
	}
	if pkl == nil {
		return nil, errors.New("no data.pkl record (not a torch.save file, or a TorchScript archive)")
	}
	dir := path.Dir(pkl.Name)
	if bo, ok := records[path.Join(dir, "byteorder")]; ok {
		b, err := readRecord(bo, 16)
		if err != nil {
			return nil, fmt.Errorf("byteorder: %w", err)
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("byteorder %q: only little-endian files are read", b)
		}
	}
	if pkl.UncompressedSize64 > maxPickleBytes {
		return nil, fmt.Errorf("data.pkl is %d bytes, over the %d-byte limit", pkl.UncompressedSize64, maxPickleBytes)
	}
	code, err := readRecord(pkl, maxPickleBytes+1)
	if err != nil {
		return nil, fmt.Errorf("data.pkl: %w", err)
	}
	if len(code) > maxPickleBytes {
		return nil, fmt.Errorf("data.pkl is over the %d-byte limit", maxPickleBytes)
	}
	if err := checkPickle(code); err != nil {
		return nil, fmt.Errorf("data.pkl: %w", err)
	}

	storages := map[string]pytorch.StorageInterface{}
	u := pickle.NewUnpickler(bytes.NewReader(code))
	fallback := u.FindClass
	u.FindClass = func(module, name string) (any, error) {
		if c, ok := storageClasses[module+"."+name]; ok {
			return c, nil
		}
		if module+"."+name == "torch._utils._rebuild_tensor_v2" {
			return &pytorch.RebuildTensorV2{}, nil
		}
		if fallback != nil {
			return fallback(module, name)
		}
		return nil, fmt.Errorf("class %s.%s is not read", module, name)
	}
	u.PersistentLoad = func(id any) (any, error) {
		t, ok := id.(*types.Tuple)
		if !ok || t.Len() < 5 {
			return nil, fmt.Errorf("persistent id %v: want ('storage', type, key, location, numel)", id)
		}
		kind, _ := t.Get(0).(string)
		class, classOK := t.Get(1).(storageClass)
		key, keyOK := t.Get(2).(string)
		loc, locOK := t.Get(3).(string)
		numel, numelOK := t.Get(4).(int)
		if kind != "storage" || !classOK || !keyOK || !locOK || !numelOK || numel < 0 {
			return nil, fmt.Errorf("persistent id %v: want ('storage', type, key, location, numel)", id)
		}
		if s, ok := storages[key]; ok {
			return s, nil
		}
		rec, ok := records[path.Join(dir, "data", key)]
		if !ok {
			return nil, fmt.Errorf("storage %q: no record %s", key, path.Join(dir, "data", key))
		}
		esz := class.size
		need := uint64(numel) * uint64(esz)
		if need > maxStorageBytes || rec.UncompressedSize64 < need {
			return nil, fmt.Errorf("storage %q: %d elements of %d bytes, record holds %d bytes", key, numel, esz, rec.UncompressedSize64)
		}
		if avail := possibleBytes(rec, size); need > avail {
			return nil, fmt.Errorf("storage %q: %d elements of %d bytes, record holds at most %d bytes", key, numel, esz, avail)
		}
		r, err := rec.Open()
		if err != nil {
			return nil, fmt.Errorf("storage %q: %w", key, err)
		}
		defer r.Close()
		s := class.New(numel, loc)
		if err := s.SetFromFileWithSize(r, numel); err != nil {
			return nil, fmt.Errorf("storage %q: %w", key, err)
		}
		storages[key] = s
		return s, nil
	}
	obj, err := u.Load()
	if err != nil {
		return nil, fmt.Errorf("data.pkl: %w", err)
	}
	return convert(obj, 0)
}

// storageClass is a typed storage torch.save names, with its element size.
type storageClass struct {
	pytorch.StorageClassInterface
	size int
}

// storageClasses are the typed storages torch.save names.
var storageClasses = map[string]storageClass{
	"torch.HalfStorage":     {&pytorch.HalfStorageClass{}, 2},
	"torch.BFloat16Storage": {&pytorch.BFloat16StorageClass{}, 2},
	"torch.FloatStorage":    {&pytorch.FloatStorageClass{}, 4},
	"torch.DoubleStorage":   {&pytorch.DoubleStorageClass{}, 8},
	"torch.CharStorage":     {&pytorch.CharStorageClass{}, 1},
	"torch.ByteStorage":     {&pytorch.ByteStorageClass{}, 1},
	"torch.BoolStorage":     {&pytorch.BoolStorageClass{}, 1},
	"torch.ShortStorage":    {&pytorch.ShortStorageClass{}, 2},
	"torch.IntStorage":      {&pytorch.IntStorageClass{}, 4},
	"torch.LongStorage":     {&pytorch.LongStorageClass{}, 8},
}

// possibleBytes bounds what record f can decompress to in an archive of
// size bytes.
func possibleBytes(f *zip.File, size int64) uint64 {
	off, err := f.DataOffset()
	if err != nil || off < 0 || off > size {
		return 0
	}
	left := uint64(size - off)
	switch f.Method {
	case zip.Store:
		return min(left, f.CompressedSize64)
	case zip.Deflate:
		return min(left, f.CompressedSize64) * 1032
	}
	return 0
}

func readRecord(f *zip.File, limit int64) ([]byte, error) {
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, limit))
}

// convert turns gopickle's values into the Go values Load documents.
func convert(v any, depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("objects nested more than 64 deep")
	}
	switch x := v.(type) {
	case nil, bool, int, float64, string:
		return x, nil
	case *pytorch.Tensor:
		return tensorOf(x)
	case *types.Dict:
		kv := make([][2]any, 0, x.Len())
		for _, e := range *x {
			kv = append(kv, [2]any{e.Key, e.Value})
		}
		return convertDict(kv, depth)
	case *types.OrderedDict:
		kv := make([][2]any, 0, x.Len())
		for k, e := range x.Map {
			kv = append(kv, [2]any{k, e.Value})
		}
		return convertDict(kv, depth)
	case *types.List:
		return convertSeq(*x, depth)
	case *types.Tuple:
		return convertSeq(*x, depth)
	}
	return fmt.Sprintf("<%T>", v), nil // other objects: named, not read
}

// convertDict converts a dict's (key, value) pairs; keys must be strings.
func convertDict(kv [][2]any, depth int) (map[string]any, error) {
	m := make(map[string]any, len(kv))
	for _, p := range kv {
		k, ok := p[0].(string)
		if !ok {
			return nil, fmt.Errorf("dict key %v is not a string", p[0])
		}
		cv, err := convert(p[1], depth+1)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		m[k] = cv
	}
	return m, nil
}

func convertSeq(xs []any, depth int) ([]any, error) {
	out := make([]any, len(xs))
	for i, e := range xs {
		cv, err := convert(e, depth+1)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = cv
	}
	return out, nil
}

// tensorOf gathers t's elements (any strides within its storage) into a
// row-major float64 tensor.
func tensorOf(t *pytorch.Tensor) (*Tensor, error) {
	var get func(i int) float64
	var n int
	switch s := t.Source.(type) {
	case *pytorch.HalfStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.BFloat16Storage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.FloatStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.DoubleStorage:
		n, get = len(s.Data), func(i int) float64 { return s.Data[i] }
	case *pytorch.CharStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.ByteStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.BoolStorage:
		n, get = len(s.Data), func(i int) float64 {
			if s.Data[i] {
				return 1
			}
			return 0
		}
	case *pytorch.ShortStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.IntStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	case *pytorch.LongStorage:
		n, get = len(s.Data), func(i int) float64 { return float64(s.Data[i]) }
	default:
		return nil, fmt.Errorf("tensor storage %T is not read", t.Source)
	}
	if len(t.Stride) != len(t.Size) {
		return nil, fmt.Errorf("tensor of shape %v has strides %v", t.Size, t.Stride)
	}
	count := 1
	hi := t.StorageOffset // the largest element offset read
	for d, sz := range t.Size {
		if sz < 0 || t.Stride[d] < 0 {
			return nil, fmt.Errorf("tensor of shape %v, strides %v: negative", t.Size, t.Stride)
		}
		if sz == 0 {
			count = 0
			break
		}
		if sz > maxElems/count || t.Stride[d] > maxElems {
			return nil, fmt.Errorf("tensor of shape %v, strides %v: over %d elements", t.Size, t.Stride, maxElems)
		}
		count *= sz
		hi += (sz - 1) * t.Stride[d]
	}
	if count > n {
		return nil, fmt.Errorf("tensor of shape %v has more elements than its storage of %d (a broadcast view: save a contiguous copy)", t.Size, n)
	}
	if count > 0 && (t.StorageOffset < 0 || hi >= n) {
		return nil, fmt.Errorf("tensor of shape %v, strides %v, offset %d reads outside its storage of %d elements", t.Size, t.Stride, t.StorageOffset, n)
	}
	out := &Tensor{Shape: append([]int(nil), t.Size...), Data: make([]float64, count)}
	idx := make([]int, len(t.Size))
	for i := range count {
		off := t.StorageOffset
		for d, x := range idx {
			off += x * t.Stride[d]
		}
		out.Data[i] = get(off)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < t.Size[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, nil
}
