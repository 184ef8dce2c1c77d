//go:build linux && amd64 && cgo

package ktformat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"unsafe"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// KTDirFormat is QuantManifest.Format for a directory written by
// KTransformers' own converter (kt-kernel/scripts/convert_cpu_weights.py
// with --quant-method int8 or int4): either its merged safetensors
// (blk.{L}.ffn_{gate|up|down}_exps.{E}.numa.{N}.{weight|scale}, weight I8
// 1-D holding the BufferB image, scale F32 1-D) or, with
// --no-merge-safetensor, its _layer_{L}/_numa_{N}/{INT8|INT4}_{proj}_{E}_{bytes}Byte_{quant|scale}_.kt files.
const KTDirFormat = "ktransformers-amx"

// ErrNotKTDir is returned by OpenKTDir for a directory with neither KT's
// expert tensor names nor its _layer_* folders.
var ErrNotKTDir = errors.New("no KTransformers CPU expert weights (blk.*.ffn_*_exps.*.numa.* tensors or _layer_*/_numa_*/*.kt files)")

var (
	ktKeyRE = regexp.MustCompile(`^blk\.(\d{1,6})\.ffn_(gate|up|down)_exps\.(\d{1,6})\.numa\.(\d{1,2})\.(weight|scale)$`)
	// the size part is absent in older KT releases' names ({INT8|INT4}_{proj}_{E}_quant_.kt)
	ktFileRE = regexp.MustCompile(`^(INT8|INT4)_(gate|up|down)_(\d{1,6})(?:_(\d{1,12})Byte)?_(quant|scale)_\.kt$`)
	ktDirRE  = regexp.MustCompile(`^_(layer|numa)_(\d{1,6})$`)
)

// ktKey names one tensor of a KT directory.
type ktKey struct {
	layer, expert, pool int
	proj                cpuexperts.Proj
	scale               bool
}

func (k ktKey) String() string {
	what := "weight"
	if k.scale {
		what = "scale"
	}
	return QuantKey(k.layer, k.expert, k.pool, k.proj, what)
}

// ktDir is an opened KT directory.
type ktDir struct {
	dir    string
	ckpt   *safetensors.Checkpoint // merged form; nil for .kt files
	files  map[ktKey]string        // .kt form: path of each tensor
	bits   int
	ip     int    // each pool's intermediate rows
	nblock [3]int // N_BLOCK per projection
}

func parseProj(s string) cpuexperts.Proj {
	switch s {
	case "gate":
		return cpuexperts.Gate
	case "up":
		return cpuexperts.Up
	}
	return cpuexperts.Down
}

// OpenKTDir opens a directory of KTransformers' own converted AMXINT8 or
// AMXINT4 experts for a model with the given hidden and intermediate sizes.
// It finds the layers, experts and NUMA pools from the names, the method
// from the sizes, checks that every tensor is present and sized as KT
// writes it, and finds the layout version (N_BLOCK) from the first
// expert's bytes. It returns ErrNotKTDir when dir holds no KT expert names.
func OpenKTDir(dir string, hidden, intermediate int) (*QuantDir, error) {
	d := &ktDir{dir: dir}
	keys, sizes, err := d.scan()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*QuantDir, error) {
		if d.ckpt != nil {
			d.ckpt.Close()
		}
		return nil, fmt.Errorf("KT weights %s: %w", dir, err)
	}
	grid, err := ktGrid(keys)
	if err != nil {
		return fail(err)
	}
	man := QuantManifest{Format: KTDirFormat, ThreadpoolCnt: grid.pools, Experts: grid.experts, Hidden: hidden,
		Intermediate: intermediate, Layers: grid.layers, Source: dir, ShardsPerLayer: "merged safetensors"}
	if d.ckpt == nil {
		man.ShardsPerLayer = "_layer_*/_numa_*/*.kt"
	}
	if hidden <= 0 || intermediate <= 0 || intermediate%grid.pools != 0 {
		return fail(fmt.Errorf("intermediate size %d does not split into the %d NUMA parts the files were written for", intermediate, grid.pools))
	}
	d.ip = intermediate / grid.pools
	first := ktKey{layer: grid.layers[0], proj: cpuexperts.Gate}
	switch sizes[first] {
	case int64(d.ip * hidden):
		d.bits, man.Method = 8, cpuexperts.AMXINT8
	case int64(d.ip * hidden / 2):
		d.bits, man.Method = 4, cpuexperts.AMXINT4
	default:
		return fail(fmt.Errorf("%s: %d bytes, want %d (AMXINT8) or %d (AMXINT4) for a [%d %d] slice (hidden %d, intermediate %d over %d NUMA parts)",
			first, sizes[first], d.ip*hidden, d.ip*hidden/2, d.ip, hidden, hidden, intermediate, grid.pools))
	}
	man.Bits = d.bits
	for _, k := range keys {
		sz := sizes[k]
		n, kk := d.shape(k.proj, hidden)
		want := int64(ktWeightBytes(n, kk, d.bits))
		if k.scale {
			want = int64(4 * n)
		}
		if sz != want {
			hint := ""
			if k.scale && sz > want && sz%want == 0 {
				hint = fmt.Sprintf("; %d scales per row look like one of KT's k-group layouts, which kt does not read (convert from the HF checkpoint with kt quant, or use --kt-method INT4_KGROUP on it)", sz/want)
			}
			return fail(fmt.Errorf("%s: %d bytes, want %d (%s [%d %d])%s", k, sz, want, man.Method, n, kk, hint))
		}
	}
	for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
		n, k := d.shape(p, hidden)
		if err := ktCheckShape(n, k, d.bits); err != nil {
			return fail(fmt.Errorf("%s_proj: %w", p, err))
		}
		key := ktKey{layer: grid.layers[0], proj: p}
		w, s, err := d.read(key)
		if err != nil {
			return fail(err)
		}
		if d.nblock[p], err = ktDetectNBlock(w, s, n, k, d.bits); err != nil {
			return fail(fmt.Errorf("%s: %w", key, err))
		}
	}
	return &QuantDir{Manifest: man, ckpt: d.ckpt, kt: d, hidden: hidden}, nil
}

// shape returns a pool's slice of projection p as KT's BufferB sees it
// (n output rows, k inputs).
func (d *ktDir) shape(p cpuexperts.Proj, hidden int) (n, k int) {
	if p == cpuexperts.Down {
		return hidden, d.ip
	}
	return d.ip, hidden
}

// scan lists the directory's KT tensors and their byte sizes.
func (d *ktDir) scan() ([]ktKey, map[ktKey]int64, error) {
	sizes := map[ktKey]int64{}
	var keys []ktKey
	layerDirs, _ := filepath.Glob(filepath.Join(d.dir, "_layer_*"))
	if len(layerDirs) > 0 {
		d.files = map[ktKey]string{}
		method := ""
		for _, ld := range layerDirs {
			m := ktDirRE.FindStringSubmatch(filepath.Base(ld))
			if m == nil || m[1] != "layer" {
				return nil, nil, fmt.Errorf("KT weights %s: unexpected folder %s", d.dir, filepath.Base(ld))
			}
			layer, _ := strconv.Atoi(m[2])
			numas, err := os.ReadDir(ld)
			if err != nil {
				return nil, nil, fmt.Errorf("KT weights: %w", err)
			}
			for _, nd := range numas {
				m := ktDirRE.FindStringSubmatch(nd.Name())
				if m == nil || m[1] != "numa" || !nd.IsDir() {
					return nil, nil, fmt.Errorf("KT weights %s: unexpected entry %s", ld, nd.Name())
				}
				pool, _ := strconv.Atoi(m[2])
				files, err := os.ReadDir(filepath.Join(ld, nd.Name()))
				if err != nil {
					return nil, nil, fmt.Errorf("KT weights: %w", err)
				}
				for _, f := range files {
					path := filepath.Join(ld, nd.Name(), f.Name())
					m := ktFileRE.FindStringSubmatch(f.Name())
					if m == nil {
						return nil, nil, fmt.Errorf("KT weights: %s is not a file KT's converter writes", path)
					}
					if method != "" && m[1] != method {
						return nil, nil, fmt.Errorf("KT weights %s: both %s and %s files", d.dir, method, m[1])
					}
					method = m[1]
					e, _ := strconv.Atoi(m[3])
					st, err := f.Info()
					if err != nil {
						return nil, nil, fmt.Errorf("KT weights: %w", err)
					}
					declared := st.Size()
					if m[4] != "" {
						declared, _ = strconv.ParseInt(m[4], 10, 64)
					}
					k := ktKey{layer: layer, expert: e, pool: pool, proj: parseProj(m[2]), scale: m[5] == "scale"}
					if _, dup := d.files[k]; dup {
						return nil, nil, fmt.Errorf("KT weights %s: two files for %s", d.dir, k)
					}
					if st.Size() != declared {
						return nil, nil, fmt.Errorf("KT weights: %s holds %d bytes, its name says %d (truncated?)", path, st.Size(), declared)
					}
					d.files[k] = path
					sizes[k] = declared
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 {
			return nil, nil, fmt.Errorf("KT weights %s: _layer_* folders hold no .kt files", d.dir)
		}
		return keys, sizes, nil
	}
	if m, _ := filepath.Glob(filepath.Join(d.dir, "*.safetensors")); len(m) == 0 {
		return nil, nil, ErrNotKTDir
	}
	c, err := safetensors.OpenDir(d.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range c.Names() {
		m := ktKeyRE.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		info, _ := c.Info(name)
		layer, _ := strconv.Atoi(m[1])
		e, _ := strconv.Atoi(m[3])
		pool, _ := strconv.Atoi(m[4])
		k := ktKey{layer: layer, expert: e, pool: pool, proj: parseProj(m[2]), scale: m[5] == "scale"}
		want := tensor.I8
		if k.scale {
			want = tensor.F32
		}
		if len(info.Shape) != 1 || (info.DType != want && !(want == tensor.I8 && info.DType == tensor.U8)) {
			c.Close()
			if !k.scale && len(info.Shape) == 2 {
				return nil, nil, fmt.Errorf("KT weights %s: %s is %s %v, a kt quant tensor, but the directory has no %s: an interrupted kt quant output? Run kt quant again",
					d.dir, name, info.DType, info.Shape, QuantManifestName)
			}
			return nil, nil, fmt.Errorf("KT weights %s: %s is %s %v, want a 1-D %s as KT's converter writes it", d.dir, name, info.DType, info.Shape, want)
		}
		sizes[k] = info.Size
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		c.Close()
		return nil, nil, ErrNotKTDir
	}
	d.ckpt = c
	return keys, sizes, nil
}

type ktGridInfo struct {
	layers         []int
	experts, pools int
}

// ktGrid checks that keys cover every layer x expert x pool x projection x
// {weight, scale} with experts and pools numbered from 0, and returns the counts.
func ktGrid(keys []ktKey) (ktGridInfo, error) {
	have := map[ktKey]bool{}
	var g ktGridInfo
	for _, k := range keys {
		have[k] = true
		if !slices.Contains(g.layers, k.layer) {
			g.layers = append(g.layers, k.layer)
		}
		g.experts = max(g.experts, k.expert+1)
		g.pools = max(g.pools, k.pool+1)
	}
	slices.Sort(g.layers)
	if g.pools > 8 {
		return g, fmt.Errorf("%d NUMA parts; kt runs at most 8 thread pools", g.pools)
	}
	if want := len(g.layers) * g.experts * g.pools * 6; want != len(have) {
		for _, l := range g.layers {
			for e := 0; e < g.experts; e++ {
				for pool := 0; pool < g.pools; pool++ {
					for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
						for _, s := range []bool{false, true} {
							if k := (ktKey{l, e, pool, p, s}); !have[k] {
								return g, fmt.Errorf("%s is missing (%d layers, %d experts and %d NUMA parts elsewhere)", k, len(g.layers), g.experts, g.pools)
							}
						}
					}
				}
			}
		}
	}
	return g, nil
}

// read returns one projection slice's BufferB weight image and scales.
func (d *ktDir) read(k ktKey) ([]byte, []float32, error) {
	sk := k
	sk.scale = true
	if d.ckpt != nil {
		w, err := d.ckpt.Tensor(k.String())
		if err != nil {
			return nil, nil, err
		}
		s, err := d.ckpt.Tensor(sk.String())
		if err != nil {
			return nil, nil, err
		}
		sc, err := s.F32()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", sk, err)
		}
		return w.Data, sc, nil
	}
	if d.files[k] == "" || d.files[sk] == "" {
		return nil, nil, fmt.Errorf("KT weights %s: no files for %s", d.dir, k)
	}
	w, err := os.ReadFile(d.files[k])
	if err != nil {
		return nil, nil, fmt.Errorf("KT weights: %w", err)
	}
	sb, err := os.ReadFile(d.files[sk])
	if err != nil {
		return nil, nil, fmt.Errorf("KT weights: %w", err)
	}
	sc := make([]float32, len(sb)/4)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(sc))), len(sc)*4), sb)
	return w, sc, nil
}

// ktLayer is one layer of a KT directory as a QuantSource.
type ktLayer struct {
	d      *ktDir
	layer  int
	pools  int
	hidden int
}

func (q *ktLayer) Pools() int { return q.pools }

// Quant decodes one pool's slice of a projection into kt's row-major form.
func (q *ktLayer) Quant(e, pool int, p cpuexperts.Proj) (cpuexperts.QuantMatrix, error) {
	k := ktKey{layer: q.layer, expert: e, pool: pool, proj: p}
	w, s, err := q.d.read(k)
	if err != nil {
		return cpuexperts.QuantMatrix{}, err
	}
	n, kk := q.d.shape(p, q.hidden)
	m, err := ktUnpermute(w, s, n, kk, q.d.bits, q.d.nblock[p])
	if err != nil {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("%s (KT layout, N_BLOCK %d): %w", k, q.d.nblock[p], err)
	}
	return m, nil
}
