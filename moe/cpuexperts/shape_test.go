package cpuexperts

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckShape(t *testing.T) {
	for _, c := range []struct {
		m              Method
		hid, inter, np int
		want           []string // substrings of the error; nil = no error
	}{
		{"", 2048, 768, 1, nil},
		{AMXINT4, 2048, 768, 2, nil},
		{BF16, 2048, 96, 1, nil},
		// qwen3moe-a: hidden 64 is the real cause, not the intermediate size
		{AMXINT8, 64, 32, 1, []string{"hidden size 64 is not a multiple of 128"}},
		{"", 128, 96, 5, []string{"intermediate size 96 does not divide into 5 thread pools"}},
		{"", 128, 80, 1, []string{"slice (80 = 80 / 1 pools) is not a multiple of 32"}},
		{AMXINT4, 128, 96, 1, []string{"AMXINT4 needs each pool's intermediate slice (96 = 96 / 1 pools) to be a multiple of 128"}},
		{FP8, 64, 256, 4, []string{"hidden size 64", "FP8 needs each pool's intermediate slice (64 = 256 / 4 pools)"}},
		{BF16, 0, 32, 1, []string{"must be positive"}},
	} {
		err := CheckShape(c.m, c.hid, c.inter, c.np)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s %d/%d/%d: %v", c.m, c.hid, c.inter, c.np, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s %d/%d/%d: no error", c.m, c.hid, c.inter, c.np)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %d/%d/%d: %q lacks %q", c.m, c.hid, c.inter, c.np, err, w)
			}
		}
	}
	if got, want := MethodsFor(128, 96, 1), []Method{BF16, AMXBF16, AMXINT8}; !slices.Equal(got, want) {
		t.Errorf("MethodsFor(128, 96, 1) = %v, want %v", got, want)
	}
	if got := MethodsFor(64, 32, 1); got != nil {
		t.Errorf("MethodsFor(64, 32, 1) = %v, want none", got)
	}
}
