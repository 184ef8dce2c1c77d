package tensor

import "math"

// BF16ToF32 widens a bfloat16 bit pattern to float32.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16 (ties to even), keeping NaN a NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern to float32.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F8E4M3ToF32 widens an OCP FP8 E4M3 (fn: no infinities, 0x7f/0xff are NaN) value to float32.
func F8E4M3ToF32(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	mant := float32(b & 7)
	if exp == 0xf && b&7 == 7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * mant / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}
