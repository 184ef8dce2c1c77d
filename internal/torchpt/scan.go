package torchpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// argKind is how a pickle opcode's argument is laid out.
type argKind uint8

const (
	argNone  argKind = iota
	argFixed         // n bytes
	argLen           // an n-byte little-endian length, then that many bytes
	argLine          // up to and including a newline
	argLine2         // two newline-terminated lines
)

type opArg struct {
	kind argKind
	n    int
}

// pickleOps lists every opcode of pickle protocols 0-5 with its argument.
var pickleOps = func() map[byte]opArg {
	m := map[byte]opArg{}
	for _, c := range []byte("(.0)12NRabdeelostu}]\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98Q") {
		m[c] = opArg{argNone, 0}
	}
	for c, n := range map[byte]int{'J': 4, 'K': 1, 'M': 2, 'q': 1, 'r': 4, 'h': 1, 'j': 4, 'G': 8, 0x80: 1, 0x82: 1, 0x83: 2, 0x84: 4} {
		m[c] = opArg{argFixed, n}
	}
	for c, n := range map[byte]int{'T': 4, 'U': 1, 'X': 4, 0x8c: 1, 0x8d: 8, 'B': 4, 'C': 1, 0x8e: 8, 0x96: 8, 0x8a: 1, 0x8b: 4} {
		m[c] = opArg{argLen, n}
	}
	for _, c := range []byte("ILFSVPpg") {
		m[c] = opArg{argLine, 0}
	}
	m['c'] = opArg{argLine2, 0}
	m['i'] = opArg{argLine2, 0}
	return m
}()

// checkPickle walks the opcodes of a pickle and refuses unknown opcodes and
// any length that runs past the end of the data (the decoder allocates a
// declared length before it reads, so a forged length would make it
// allocate gigabytes). FRAME (0x95) is a hint of the bytes that follow: its
// length must fit too.
func checkPickle(b []byte) error {
	for i := 0; i < len(b); {
		op := b[i]
		i++
		if op == 0x95 { // FRAME: 8-byte length of the frame that follows
			if len(b)-i < 8 {
				return fmt.Errorf("truncated FRAME at byte %d", i-1)
			}
			if n := binary.LittleEndian.Uint64(b[i:]); n > uint64(len(b)-i-8) {
				return fmt.Errorf("FRAME at byte %d declares %d bytes, %d remain", i-1, n, len(b)-i-8)
			}
			i += 8
			continue
		}
		a, ok := pickleOps[op]
		if !ok {
			return fmt.Errorf("unknown pickle opcode 0x%02x at byte %d", op, i-1)
		}
		switch a.kind {
		case argFixed:
			if len(b)-i < a.n {
				return fmt.Errorf("truncated opcode 0x%02x at byte %d", op, i-1)
			}
			i += a.n
		case argLen:
			if len(b)-i < a.n {
				return fmt.Errorf("truncated opcode 0x%02x at byte %d", op, i-1)
			}
			var n uint64
			for k := a.n - 1; k >= 0; k-- {
				n = n<<8 | uint64(b[i+k])
			}
			i += a.n
			if n > uint64(len(b)-i) {
				return fmt.Errorf("opcode 0x%02x at byte %d declares %d bytes, %d remain", op, i-1-a.n, n, len(b)-i)
			}
			i += int(n)
		case argLine, argLine2:
			lines := 1
			if a.kind == argLine2 {
				lines = 2
			}
			for range lines {
				j := bytes.IndexByte(b[i:], '\n')
				if j < 0 {
					return fmt.Errorf("unterminated argument of opcode 0x%02x", op)
				}
				i += j + 1
			}
		}
		if op == '.' { // STOP
			return nil
		}
	}
	return fmt.Errorf("no STOP opcode")
}
