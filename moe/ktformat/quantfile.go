//go:build linux && amd64 && cgo

package ktformat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unsafe"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// QuantFormat identifies kt quant's on-disk layout in shard metadata.
const QuantFormat = "kt-cpu-experts/1"

// QuantManifestName is the file kt quant writes last, naming every shard.
const QuantManifestName = "kt_quant.json"

// Layouts of kt quant's weights (QuantManifest.Layout, shard metadata "layout").
const (
	// LayoutRows is kt's own: row-major int8 [rows, cols] or packed int4
	// [rows, cols/2] (low nibble first), scale = value per q.
	LayoutRows = "rows"
	// LayoutKT is KTransformers' own: the BufferB byte image as a 1-D int8
	// tensor and KT's scales (see ktlayout.go), readable by KT itself.
	LayoutKT = "ktransformers"
)

// QuantManifest describes a directory written by kt quant.
type QuantManifest struct {
	Format         string            `json:"format"`
	Method         cpuexperts.Method `json:"method"` // AMXINT8 or AMXINT4
	Bits           int               `json:"bits"`
	ThreadpoolCnt  int               `json:"threadpool_count"`
	Experts        int               `json:"experts"`
	Hidden         int               `json:"hidden"`
	Intermediate   int               `json:"intermediate"`
	Layers         []int             `json:"layers"`
	Source         string            `json:"source"`
	SourceDType    string            `json:"source_dtype"`
	ShardsPerLayer string            `json:"shards"`
	// Layout is LayoutRows (also when empty: manifests without the field) or LayoutKT.
	Layout string `json:"layout,omitempty"`
}

// QuantKey is the tensor name of KT's CPU expert layout.
func QuantKey(layer, expert, pool int, p cpuexperts.Proj, what string) string {
	return fmt.Sprintf("blk.%d.ffn_%s_exps.%d.numa.%d.%s", layer, p, expert, pool, what)
}

// poolSlices returns each pool's first intermediate row and row count.
func poolSlices(inter, pools int) (start, n []int) {
	for p := 0; p < pools; p++ {
		start = append(start, p*(inter/pools))
		n = append(n, inter/pools)
	}
	return start, n
}

// QuantShardMeta is the metadata kt quant stores in each shard.
func QuantShardMeta(m cpuexperts.Method, pools, layer int) map[string]string {
	return map[string]string{"format": QuantFormat, "method": string(m), "threadpool_count": strconv.Itoa(pools), "layer": strconv.Itoa(layer)}
}

// QuantizeLayer converts one layer's experts from src into a safetensors
// shard at path (written under a temporary name and renamed when complete),
// split into pools slices of the intermediate dimension, as int8 (AMXINT8)
// or int4 (AMXINT4) with one float32 scale per row. progress is called with
// the bytes of source weights done so far.
func QuantizeLayer(src cpuexperts.Source, spec cpuexperts.LayerSpec, pools, layer int, path string, progress func(done int64)) error {
	return quantizeLayer(src, spec, pools, layer, path, progress, false)
}

// QuantizeLayerKT is QuantizeLayer writing KTransformers' own layout
// (LayoutKT): each slice is the byte image of KT's BufferB for the newest
// KT release (int8 1-D tensor) with its float32 scales, quantized with KT's
// rules, so the bytes equal what KT's convert_cpu_weights.py writes for the
// same weights and KT reads the shard as its own.
func QuantizeLayerKT(src cpuexperts.Source, spec cpuexperts.LayerSpec, pools, layer int, path string, progress func(done int64)) error {
	return quantizeLayer(src, spec, pools, layer, path, progress, true)
}

func quantizeLayer(src cpuexperts.Source, spec cpuexperts.LayerSpec, pools, layer int, path string, progress func(done int64), kt bool) error {
	bits := 8
	switch spec.Method {
	case cpuexperts.AMXINT8:
	case cpuexperts.AMXINT4:
		bits = 4
	default:
		return fmt.Errorf("kt quant writes AMXINT8 or AMXINT4, not %s", spec.Method)
	}
	H, I := spec.Hidden, spec.Intermediate
	if err := cpuexperts.CheckShape(spec.Method, H, I, pools); err != nil {
		return err
	}
	start, ip := poolSlices(I, pools)
	dt := tensor.I8
	if bits == 4 {
		dt = tensor.U8
	}
	shape := func(p cpuexperts.Proj, pool int) (int, int) {
		if p == cpuexperts.Down {
			return H, ip[pool]
		}
		return ip[pool], H
	}
	layout := LayoutRows
	if kt {
		layout = LayoutKT
		for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
			r, c := shape(p, 0)
			if err := ktCheckShape(r, c, bits); err != nil {
				return fmt.Errorf("KT's layout cannot hold %s_proj: %w", p, err)
			}
		}
	}
	var specs []safetensors.Spec
	for e := 0; e < spec.Experts; e++ {
		for pool := 0; pool < pools; pool++ {
			for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
				r, c := shape(p, pool)
				ws := safetensors.Spec{Name: QuantKey(layer, e, pool, p, "weight"), DType: dt, Shape: []int64{int64(r), int64(c * bits / 8)}}
				if kt {
					ws.DType, ws.Shape = tensor.I8, []int64{int64(ktWeightBytes(r, c, bits))}
				}
				specs = append(specs, ws,
					safetensors.Spec{Name: QuantKey(layer, e, pool, p, "scale"), DType: tensor.F32, Shape: []int64{int64(r)}})
			}
		}
	}
	meta := QuantShardMeta(spec.Method, pools, layer)
	meta["layout"] = layout
	w, err := safetensors.Create(path, specs, meta)
	if err != nil {
		return err
	}
	type result struct{ data [][]byte }
	const chunk = 16
	var done int64
	for e0 := 0; e0 < spec.Experts; e0 += chunk {
		n := min(chunk, spec.Experts-e0)
		res := make([]result, n)
		err := cpuexperts.ParallelExperts(n, func(i int, buf *[]float32) error {
			e := e0 + i
			for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
				m, err := src.Matrix(e, p)
				if err != nil {
					return fmt.Errorf("layer %d expert %d %s_proj: %w", layer, e, p, err)
				}
				rows, cols := I, H
				if p == cpuexperts.Down {
					rows, cols = H, I
				}
				if err := m.Check(rows, cols); err != nil {
					return fmt.Errorf("layer %d expert %d %s_proj: %w", layer, e, p, err)
				}
				if !m.PackedInt4() && m.DType != tensor.BF16 && m.DType != tensor.F32 && m.DType != tensor.F8E4M3 {
					return fmt.Errorf("layer %d expert %d %s_proj: dtype %s, want BF16, F32, F8_E4M3 or pack-quantized INT4", layer, e, p, m.DType)
				}
				f := m.ToF32(buf)
				for pool := 0; pool < pools; pool++ {
					r, c := shape(p, pool)
					off := start[pool] * H
					if p == cpuexperts.Down {
						off = start[pool]
					}
					var q, s []byte
					if kt {
						var err error
						if q, s, err = ktQuantSlice(f[off:], cols, r, c, bits); err != nil {
							return err
						}
					} else {
						q, s = quantRows(f[off:], cols, r, c, bits)
					}
					res[i].data = append(res[i].data, q, s)
				}
			}
			// reorder to declaration order: pools outer, projections inner
			d := res[i].data
			ordered := make([][]byte, 0, len(d))
			for pool := 0; pool < pools; pool++ {
				for p := 0; p < 3; p++ {
					k := (p*pools + pool) * 2
					ordered = append(ordered, d[k], d[k+1])
				}
			}
			res[i].data = ordered
			return nil
		})
		if err != nil {
			w.Abort()
			return err
		}
		for _, r := range res {
			for _, b := range r.data {
				if _, err := w.Write(b); err != nil {
					w.Abort()
					return fmt.Errorf("write %s: %w", path, err)
				}
			}
		}
		done += int64(n) * 3 * int64(H) * int64(I) * 2
		if progress != nil {
			progress(done)
		}
	}
	return w.Close()
}

// quantRows quantizes rows x cols of f (row stride ld) to int8 or packed int4
// with one scale per row (cpuexperts.QuantizeRows); returns the weight bytes
// and the scales as bytes.
func quantRows(f []float32, ld, rows, cols, bits int) (q, s []byte) {
	q, scale := cpuexperts.QuantizeRows(f, ld, rows, cols, bits)
	return q, unsafe.Slice((*byte)(unsafe.Pointer(&scale[0])), 4*rows)
}

// QuantDir is a directory of pre-quantized experts opened for loading:
// kt quant's output (OpenQuantDir) or KTransformers' own (OpenKTDir, with
// Manifest.Format KTDirFormat).
type QuantDir struct {
	Manifest QuantManifest
	ckpt     *safetensors.Checkpoint
	kt       *ktDir // KT's own layout
	hidden   int
}

// OpenQuantDir opens dir and checks its manifest.
func OpenQuantDir(dir string) (*QuantDir, error) {
	b, err := os.ReadFile(filepath.Join(dir, QuantManifestName))
	if err != nil {
		return nil, fmt.Errorf("%s: not a complete kt quant output (%w)", dir, err)
	}
	var m QuantManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, QuantManifestName), err)
	}
	if m.Format != QuantFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", filepath.Join(dir, QuantManifestName), m.Format, QuantFormat)
	}
	if (m.Method != cpuexperts.AMXINT8 || m.Bits != 8) && (m.Method != cpuexperts.AMXINT4 || m.Bits != 4) {
		return nil, fmt.Errorf("%s: method %s with %d bits", filepath.Join(dir, QuantManifestName), m.Method, m.Bits)
	}
	if m.ThreadpoolCnt < 1 || m.ThreadpoolCnt > 8 {
		return nil, fmt.Errorf("%s: threadpool_count %d outside 1..8", filepath.Join(dir, QuantManifestName), m.ThreadpoolCnt)
	}
	switch m.Layout {
	case "", LayoutRows:
	case LayoutKT:
		kd, err := OpenKTDir(dir, m.Hidden, m.Intermediate)
		if err != nil {
			return nil, err
		}
		if kd.Manifest.Method != m.Method || kd.Manifest.ThreadpoolCnt != m.ThreadpoolCnt || kd.Manifest.Experts != m.Experts || !slices.Equal(kd.Manifest.Layers, m.Layers) {
			kd.Close()
			return nil, fmt.Errorf("%s: the shards hold %s for %d pools, %d experts, layers %v; %s says %s, %d, %d, %v",
				dir, kd.Manifest.Method, kd.Manifest.ThreadpoolCnt, kd.Manifest.Experts, kd.Manifest.Layers, QuantManifestName, m.Method, m.ThreadpoolCnt, m.Experts, m.Layers)
		}
		kd.Manifest = m
		return kd, nil
	default:
		return nil, fmt.Errorf("%s: layout %q, want %q or %q", filepath.Join(dir, QuantManifestName), m.Layout, LayoutRows, LayoutKT)
	}
	c, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return &QuantDir{Manifest: m, ckpt: c}, nil
}

// Close unmaps the shards.
func (d *QuantDir) Close() error {
	if d.ckpt == nil {
		return nil
	}
	return d.ckpt.Close()
}

// Layer returns the QuantSource of layer l.
func (d *QuantDir) Layer(l int) cpuexperts.QuantSource {
	if d.kt != nil {
		return &ktLayer{d: d.kt, layer: l, pools: d.Manifest.ThreadpoolCnt, hidden: d.hidden}
	}
	return &quantLayer{d: d, layer: l}
}

type quantLayer struct {
	d     *QuantDir
	layer int
}

func (q *quantLayer) Pools() int { return q.d.Manifest.ThreadpoolCnt }

func (q *quantLayer) Quant(e, pool int, p cpuexperts.Proj) (cpuexperts.QuantMatrix, error) {
	wn, sn := QuantKey(q.layer, e, pool, p, "weight"), QuantKey(q.layer, e, pool, p, "scale")
	w, err := q.d.ckpt.Tensor(wn)
	if err != nil {
		return cpuexperts.QuantMatrix{}, err
	}
	s, err := q.d.ckpt.Tensor(sn)
	if err != nil {
		return cpuexperts.QuantMatrix{}, err
	}
	sc, err := s.F32()
	if err != nil {
		return cpuexperts.QuantMatrix{}, err
	}
	bits := q.d.Manifest.Bits
	if len(w.Shape) != 2 || (bits == 8 && w.DType != tensor.I8) || (bits == 4 && w.DType != tensor.U8) {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("%s: %s %v, want a 2-D %s", wn, w.DType, w.Shape, map[int]string{8: "I8", 4: "U8"}[bits])
	}
	rows, cols := int(w.Shape[0]), int(w.Shape[1])*8/bits
	if len(sc) != rows {
		return cpuexperts.QuantMatrix{}, errors.New(sn + ": one scale per row expected")
	}
	return cpuexperts.QuantMatrix{Bits: bits, Rows: rows, Cols: cols, Data: w.Data, Scale: sc}, nil
}

// WriteQuantManifest writes dir's manifest atomically (temporary file, then rename).
func WriteQuantManifest(dir string, m QuantManifest) error {
	m.Format = QuantFormat
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".kt_quant-*.json")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, QuantManifestName))
}

// CheckQuantShardLayout reports whether path is a complete shard of layer
// for method m, pools and layout; a shard for other settings is an error (no
// resume over it). layout is LayoutRows or LayoutKT; a shard of the other
// layout is an error too.
func CheckQuantShardLayout(path string, m cpuexperts.Method, pools, layer int, layout string) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return false, nil // partial or corrupt: convert again
	}
	defer f.Close()
	md := f.Metadata()
	if md["format"] != QuantFormat || md["layer"] != strconv.Itoa(layer) {
		return false, nil
	}
	have := md["layout"]
	if have == "" {
		have = LayoutRows
	}
	if md["method"] != string(m) || md["threadpool_count"] != strconv.Itoa(pools) || have != layout {
		return false, fmt.Errorf("%s was converted as %s for %s thread pools in layout %s; this run asks for %s and %d in layout %s: use another --output or delete it",
			path, md["method"], md["threadpool_count"], have, m, pools, layout)
	}
	return true, nil
}
