package torchpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strconv"
)

// IntTensor is a row-major int32 tensor to save (torch.int32, what
// SGLang's expert-distribution recorder writes for logical_count).
type IntTensor struct {
	Shape []int
	Data  []int32
}

// Save writes obj as torch.save(obj) would (zip format, pickle protocol 2,
// storages as 64-byte-aligned stored records), so torch.load reads it.
// obj is a map[string]any (written with sorted keys) or an *IntTensor;
// map values may be nil, bool, int, float64, string, *IntTensor, or a
// nested map[string]any. name is the archive's top directory (torch uses
// the file's stem).
func Save(w io.Writer, name string, obj any) error {
	var p pickler
	p.b.WriteString("\x80\x02") // PROTO 2
	if err := p.value(obj, 0); err != nil {
		return fmt.Errorf("torchpt: save: %w", err)
	}
	p.b.WriteByte('.') // STOP

	cw := &countWriter{w: w}
	zw := zip.NewWriter(cw)
	type record struct {
		name string
		data []byte
	}
	records := []record{{name + "/data.pkl", p.b.Bytes()}, {name + "/byteorder", []byte("little")}}
	for i, t := range p.tensors {
		var d bytes.Buffer
		if err := binary.Write(&d, binary.LittleEndian, t.Data); err != nil {
			return fmt.Errorf("torchpt: save: %w", err)
		}
		records = append(records, record{name + "/data/" + strconv.Itoa(i), d.Bytes()})
	}
	records = append(records, record{name + "/version", []byte("3\n")})
	for _, r := range records {
		if err := zw.Flush(); err != nil {
			return fmt.Errorf("torchpt: save: %w", err)
		}
		// Pad the local header's extra field so the data starts on a
		// 64-byte boundary, as torch's writer does (id "FB").
		at := cw.n + 30 + int64(len(r.name)) + 4
		pad := (64 - at%64) % 64
		extra := make([]byte, 4+pad)
		binary.LittleEndian.PutUint16(extra, 0x4246)
		binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
		fw, err := zw.CreateRaw(&zip.FileHeader{Name: r.name, Method: zip.Store, Extra: extra,
			CRC32: crc32.ChecksumIEEE(r.data), CompressedSize64: uint64(len(r.data)), UncompressedSize64: uint64(len(r.data))})
		if err != nil {
			return fmt.Errorf("torchpt: save %s: %w", r.name, err)
		}
		if _, err := fw.Write(r.data); err != nil {
			return fmt.Errorf("torchpt: save %s: %w", r.name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("torchpt: save: %w", err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// pickler writes the pickle opcodes of protocol 2 for Save's values.
type pickler struct {
	b       bytes.Buffer
	tensors []*IntTensor
}

func (p *pickler) value(v any, depth int) error {
	if depth > 32 {
		return fmt.Errorf("values nested more than 32 deep")
	}
	switch x := v.(type) {
	case nil:
		p.b.WriteByte('N')
	case bool:
		if x {
			p.b.WriteByte(0x88) // NEWTRUE
		} else {
			p.b.WriteByte(0x89) // NEWFALSE
		}
	case int:
		p.int(int64(x))
	case float64:
		p.b.WriteByte('G') // BINFLOAT, big-endian
		p.b.Write(binary.BigEndian.AppendUint64(nil, math.Float64bits(x)))
	case string:
		p.str(x)
	case *IntTensor:
		return p.tensor(x)
	case map[string]any:
		p.b.WriteByte('}') // EMPTY_DICT
		if len(x) == 0 {
			return nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		p.b.WriteByte('(') // MARK
		for _, k := range keys {
			p.str(k)
			if err := p.value(x[k], depth+1); err != nil {
				return fmt.Errorf("%q: %w", k, err)
			}
		}
		p.b.WriteByte('u') // SETITEMS
	default:
		return fmt.Errorf("cannot save a %T", v)
	}
	return nil
}

func (p *pickler) int(x int64) {
	switch {
	case x >= 0 && x < 1<<8:
		p.b.Write([]byte{'K', byte(x)}) // BININT1
	case x >= 0 && x < 1<<16:
		p.b.Write([]byte{'M', byte(x), byte(x >> 8)}) // BININT2
	case x >= math.MinInt32 && x <= math.MaxInt32:
		p.b.WriteByte('J') // BININT
		p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(int32(x))))
	default:
		p.b.Write([]byte{0x8a, 8}) // LONG1, 8 bytes two's complement
		p.b.Write(binary.LittleEndian.AppendUint64(nil, uint64(x)))
	}
}

func (p *pickler) str(s string) {
	p.b.WriteByte('X') // BINUNICODE
	p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(s))))
	p.b.WriteString(s)
}

func (p *pickler) tuple(xs []int) {
	p.b.WriteByte('(')
	for _, x := range xs {
		p.int(int64(x))
	}
	p.b.WriteByte('t')
}

// tensor writes torch._utils._rebuild_tensor_v2(storage, 0, size, stride,
// False, OrderedDict()) with the storage as a persistent id, as torch does.
func (p *pickler) tensor(t *IntTensor) error {
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor shape %v", t.Shape)
		}
		n *= d
	}
	if n != len(t.Data) {
		return fmt.Errorf("tensor shape %v holds %d elements, have %d", t.Shape, n, len(t.Data))
	}
	key := strconv.Itoa(len(p.tensors))
	p.tensors = append(p.tensors, t)
	stride := make([]int, len(t.Shape))
	acc := 1
	for d := len(t.Shape) - 1; d >= 0; d-- {
		stride[d] = acc
		acc *= t.Shape[d]
	}
	p.b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n")
	p.b.WriteByte('(') // MARK: the call's arguments
	p.b.WriteByte('(') // MARK: the persistent id
	p.str("storage")
	p.b.WriteString("ctorch\nIntStorage\n")
	p.str(key)
	p.str("cpu")
	p.int(int64(n))
	p.b.WriteString("tQ") // TUPLE, BINPERSID
	p.int(0)              // storage offset
	p.tuple(t.Shape)
	p.tuple(stride)
	p.b.WriteByte(0x89) // requires_grad False
	p.b.WriteString("ccollections\nOrderedDict\n)R")
	p.b.WriteString("tR") // TUPLE of the arguments, REDUCE
	return nil
}
