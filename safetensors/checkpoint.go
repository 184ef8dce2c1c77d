package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// IndexFile is the name of the shard index Hugging Face writes next to
// sharded checkpoints.
const IndexFile = "model.safetensors.index.json"

// maxIndexSize caps the size of an index file read into memory.
const maxIndexSize = 64 << 20

// Checkpoint is a model's weights spread over one or more safetensors files
// in a directory, addressed by tensor name.
type Checkpoint struct {
	dir   string
	files []*File
	where map[string]*File
	names []string // sorted
}

// OpenDir opens the checkpoint in dir: the shards listed by
// model.safetensors.index.json when present, else model.safetensors, else
// every *.safetensors file in the directory. A tensor present in two files
// is an error, as is an index entry pointing at a shard that lacks it.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{dir: dir, where: map[string]*File{}}
	var shards []string
	var weightMap map[string]string
	idx := filepath.Join(dir, IndexFile)
	switch st, err := os.Stat(idx); {
	case err == nil:
		if st.Size() > maxIndexSize {
			return nil, fmt.Errorf("safetensors %s: %d bytes, larger than the %d-byte limit", idx, st.Size(), maxIndexSize)
		}
		weightMap, shards, err = readIndex(idx)
		if err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err == nil {
			shards = []string{"model.safetensors"}
			break
		}
		m, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: %w", dir, err)
		}
		for _, p := range m {
			shards = append(shards, filepath.Base(p))
		}
		if len(shards) == 0 {
			return nil, fmt.Errorf("safetensors %s: no %s and no *.safetensors files", dir, IndexFile)
		}
	default:
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	for _, s := range shards {
		f, err := Open(filepath.Join(dir, s))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
		for _, t := range f.Tensors() {
			if other, dup := c.where[t.Name]; dup {
				c.Close()
				return nil, fmt.Errorf("safetensors %s: tensor %q is in both %s and %s", dir, t.Name, filepath.Base(other.Path()), s)
			}
			c.where[t.Name] = f
		}
	}
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		shard := weightMap[name]
		f, ok := c.where[name]
		if !ok {
			c.Close()
			return nil, fmt.Errorf("safetensors %s: %s maps tensor %q to %s, which lacks it", dir, IndexFile, name, shard)
		}
		if got := filepath.Base(f.Path()); got != filepath.Base(shard) {
			c.Close()
			return nil, fmt.Errorf("safetensors %s: %s maps tensor %q to %s, but it is in %s", dir, IndexFile, name, shard, got)
		}
	}
	for name := range c.where {
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	return c, nil
}

// readIndex parses a shard index and returns its weight map and the
// distinct shard files in sorted order. Shard names must stay inside the
// directory.
func readIndex(path string) (map[string]string, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("safetensors %s: weight_map is missing or empty", path)
	}
	set := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
			return nil, nil, fmt.Errorf("safetensors %s: tensor %q: shard %q is not a file name in the model directory", path, name, shard)
		}
		set[shard] = true
	}
	shards := make([]string, 0, len(set))
	for s := range set {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	return idx.WeightMap, shards, nil
}

// Dir returns the checkpoint's directory.
func (c *Checkpoint) Dir() string { return c.dir }

// Files returns the open shard files.
func (c *Checkpoint) Files() []*File { return c.files }

// Names returns every tensor name, sorted. The slice is shared: do not
// modify it.
func (c *Checkpoint) Names() []string { return c.names }

// Info returns the description of the named tensor (its Offset is within
// its shard).
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	f, ok := c.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Tensor returns a zero-copy view of the named tensor.
func (c *Checkpoint) Tensor(name string) (Tensor, error) {
	f, ok := c.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors %s: tensor %q: %w", c.dir, name, ErrNotFound)
	}
	return f.Tensor(name)
}

// TotalBytes returns the summed data size of all tensors.
func (c *Checkpoint) TotalBytes() int64 {
	var n int64
	for _, f := range c.files {
		for _, t := range f.Tensors() {
			n += t.Size
		}
	}
	return n
}

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}
