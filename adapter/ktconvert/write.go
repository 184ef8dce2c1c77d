package ktconvert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// job is one adapter directory to write.
type job struct {
	out     output
	name    string // "merged", "expert", "nonexpert"
	cfg     *peft.Config
	cfgJSON []byte // cfg marshalled, checked before any tensor is written
	tensors []outTensor
	tmp     string // staging directory, sibling of out.path
	aside   string // where an existing out.path was moved during commit
}

// dataOrder ranks dtypes as the Python safetensors library orders tensor
// data (larger and later-declared dtypes first), so that files we write have
// the same layout as the reference converter's.
var dataOrder = map[tensor.DType]int{
	tensor.I64: 0, tensor.F64: 1, tensor.F32: 2, tensor.I32: 3, tensor.BF16: 4, tensor.F16: 5,
	tensor.I16: 6, tensor.F8E4M3: 7, tensor.I8: 8, tensor.U8: 9, tensor.Bool: 10,
}

func sortForWrite(ts []outTensor) []outTensor {
	s := append([]outTensor(nil), ts...)
	sort.Slice(s, func(i, j int) bool {
		a, b := s[i].spec, s[j].spec
		if dataOrder[a.DType] != dataOrder[b.DType] {
			return dataOrder[a.DType] < dataOrder[b.DType]
		}
		return a.Name < b.Name
	})
	return s
}

// writeAll stages every job in a temporary sibling directory, then swaps
// them all into place. On any failure, or when ctx is cancelled, nothing is
// left behind and existing outputs are untouched.
func writeAll(ctx context.Context, jobs []job, progress func(Progress)) (written []Written, err error) {
	defer func() {
		for i := range jobs {
			if jobs[i].tmp != "" {
				os.RemoveAll(jobs[i].tmp)
			}
		}
	}()
	var total int64
	var count int
	for _, j := range jobs {
		for _, t := range j.tensors {
			total += t.size
		}
		count += len(j.tensors)
	}
	pr := &Progress{TotalBytes: total, TotalTensors: count}
	for i := range jobs {
		j := &jobs[i]
		parent := filepath.Dir(j.out.path)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
		if j.tmp, err = os.MkdirTemp(parent, "."+filepath.Base(j.out.path)+".kt-convert-*"); err != nil {
			return nil, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
		if err := os.Chmod(j.tmp, 0o755); err != nil {
			return nil, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
		n, err := writeJob(ctx, j, pr, progress)
		if err != nil {
			return nil, err
		}
		tm, _ := j.cfg.Get("target_modules")
		written = append(written, Written{Role: j.name, Dir: j.out.path, TensorCount: len(j.tensors), Bytes: n, TargetModules: tm.([]string)})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := commit(jobs); err != nil {
		return nil, err
	}
	return written, nil
}

// writeJob writes adapter_model.safetensors, adapter_config.json and
// MarkerFile into j.tmp, streaming tensor bytes from the memory-mapped inputs.
func writeJob(ctx context.Context, j *job, pr *Progress, progress func(Progress)) (int64, error) {
	ts := sortForWrite(j.tensors)
	specs := make([]safetensors.Spec, len(ts))
	for i, t := range ts {
		specs[i] = t.spec
	}
	modelPath := filepath.Join(j.tmp, peft.ModelFile)
	w, err := safetensors.Create(modelPath, specs, map[string]string{"format": "pt"})
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	// Count the slices still to be read from each input tensor, so that its
	// mapped pages can be dropped once the last one is written: resident
	// memory then stays near one fused tensor, not the whole input.
	remaining := map[string]int{}
	for _, t := range ts {
		remaining[t.srcKey]++
	}
	var n int64
	for _, t := range ts {
		if err := ctx.Err(); err != nil {
			w.Abort()
			return 0, err
		}
		src, err := t.file.Tensor(t.srcKey)
		if err != nil {
			w.Abort()
			return 0, err
		}
		if err := w.WriteTensor(t.spec.Name, src.Data[t.start:t.start+t.size]); err != nil {
			w.Abort()
			return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
		if remaining[t.srcKey]--; remaining[t.srcKey] == 0 {
			release(src.Data)
		}
		n += t.size
		pr.Output, pr.Tensor = j.out.path, t.spec.Name
		pr.DoneBytes += t.size
		pr.DoneTensors++
		if progress != nil {
			progress(*pr)
		}
	}
	if err := w.Close(); err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	// The safetensors writer creates files 0600 (a temp file renamed into
	// place); adapters are shared with the serving user, as Python writes them.
	if err := os.Chmod(modelPath, 0o644); err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	if err := writeFileSync(filepath.Join(j.tmp, peft.ConfigFile), j.cfgJSON); err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	if err := writeFileSync(filepath.Join(j.tmp, MarkerFile), []byte(markerText)); err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	if err := syncDir(j.tmp); err != nil {
		return 0, fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
	}
	return n, nil
}

// commit moves every staged directory into place. An existing output is
// first moved aside and removed only once all outputs are in place; if a
// rename fails, the outputs already swapped are swapped back.
func commit(jobs []job) (err error) {
	done := 0
	defer func() {
		if err == nil {
			for i := range jobs {
				if jobs[i].aside != "" {
					os.RemoveAll(jobs[i].aside)
				}
			}
			return
		}
		for i := done - 1; i >= 0; i-- {
			j := &jobs[i]
			// Put the new directory back where the deferred cleanup removes it.
			if os.Rename(j.out.path, j.tmp) == nil && j.aside != "" {
				os.Rename(j.aside, j.out.path)
			}
		}
	}()
	for i := range jobs {
		j := &jobs[i]
		if _, statErr := os.Lstat(j.out.path); statErr == nil {
			j.aside = j.tmp + ".old"
			if err := os.Rename(j.out.path, j.aside); err != nil {
				j.aside = ""
				return fmt.Errorf("%s %s: move existing directory aside: %w", j.out.role, j.out.path, err)
			}
		} else if !errors.Is(statErr, os.ErrNotExist) {
			return fmt.Errorf("%s %s: %w", j.out.role, j.out.path, statErr)
		}
		if err := os.Rename(j.tmp, j.out.path); err != nil {
			if j.aside != "" {
				os.Rename(j.aside, j.out.path)
				j.aside = ""
			}
			return fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
		done++
		if err := syncDir(filepath.Dir(j.out.path)); err != nil {
			return fmt.Errorf("%s %s: %w", j.out.role, j.out.path, err)
		}
	}
	return nil
}

// release tells the kernel that the whole pages inside b, a slice of a
// read-only file mapping, are not needed for now; touching them again reads
// them back from the page cache or the file.
func release(b []byte) {
	if len(b) == 0 {
		return
	}
	ps := os.Getpagesize()
	off := (ps - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(ps))) % ps
	if off >= len(b) {
		return
	}
	b = b[off:]
	if n := len(b) &^ (ps - 1); n > 0 {
		_ = unix.Madvise(b[:n], unix.MADV_DONTNEED) // advisory: failure changes nothing
	}
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
