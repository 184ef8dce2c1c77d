package ktlora

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestKinds(t *testing.T) {
	// Shapes from KT SFT: gate/up A [E,r,H], B [E,I,r]; down A [E,r,I], B [E,H,r].
	const e, r, h, i = 4, 8, 2048, 512
	want := map[string][]int64{
		"gate_lora_a": {e, r, h}, "gate_lora_b": {e, i, r},
		"up_lora_a": {e, r, h}, "up_lora_b": {e, i, r},
		"down_lora_a": {e, r, i}, "down_lora_b": {e, h, r},
	}
	for _, k := range Kinds {
		s := k.Shape(e, r, h, i)
		if !reflect.DeepEqual(s, want[k.KTName()]) {
			t.Errorf("%s shape %v, want %v", k.KTName(), s, want[k.KTName()])
		}
		if s[k.RankDim()] != r {
			t.Errorf("%s: RankDim %d does not hold the rank", k.KTName(), k.RankDim())
		}
		feat := s[k.FeatureDim()]
		if (feat == h) != k.IsHidden() {
			t.Errorf("%s: IsHidden %v but feature dim is %d", k.KTName(), k.IsHidden(), feat)
		}
		back, ok := ParseKTName(k.KTName())
		if !ok || back != k {
			t.Errorf("ParseKTName(%q) = %v, %v", k.KTName(), back, ok)
		}
	}
	if _, ok := ParseKTName("gate_lora_c"); ok {
		t.Error("ParseKTName accepted gate_lora_c")
	}
	if got := (Kind{Down, B}).Proj.String() + "/" + (Kind{Down, B}).Factor.String(); got != "down_proj/lora_B" {
		t.Errorf("names %q", got)
	}
}

func TestParseFusedKey(t *testing.T) {
	good := []struct {
		key   string
		layer int
		kind  Kind
	}{
		{"layers.0.experts.gate_lora_a", 0, Kind{Gate, A}},
		{"layers.39.experts.down_lora_b", 39, Kind{Down, B}},
		{"layers.7.experts.up_lora_b", 7, Kind{Up, B}},
	}
	for _, tc := range good {
		l, k, err := ParseFusedKey(tc.key)
		if err != nil || l != tc.layer || k != tc.kind {
			t.Errorf("ParseFusedKey(%q) = %d, %v, %v", tc.key, l, k, err)
		}
		if FusedKey(l, k) != tc.key {
			t.Errorf("FusedKey round trip of %q gave %q", tc.key, FusedKey(l, k))
		}
	}
	bad := []struct{ key, want string }{
		{"layers.0.experts.unknown_lora_a", "unsupported"},
		{"model.layers.0.experts.gate_lora_a", "want"},
		{"layers.x.experts.gate_lora_a", "want"},
		{"layers.0.mlp.experts.gate_lora_a", "want"},
		{"layers.0.experts.gate_lora_a.weight", "want"},
		{"layers.-1.experts.gate_lora_a", "want"},
		{"layers.0.experts.", "want"},
		{"layers.03.experts.gate_lora_a", "want"},
		{"layers.99999999999999999999.experts.gate_lora_a", "out of range"},
	}
	for _, tc := range bad {
		_, _, err := ParseFusedKey(tc.key)
		var fe *FusedKeyError
		if !errors.As(err, &fe) || fe.Key != tc.key || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFusedKey(%q) error %v, want a FusedKeyError mentioning %q", tc.key, err, tc.want)
		}
	}
}

func TestExpertKey(t *testing.T) {
	k := ExpertKey(3, 17, Kind{Up, A})
	if k != "model.layers.3.mlp.experts.17.up_proj.lora_A.weight" {
		t.Fatalf("ExpertKey = %q", k)
	}
	for _, key := range []string{
		k,
		"base_model." + k,
		"base_model.model." + k,
		"base_model.model.model.layers.3.mlp.experts.17.up_proj.lora_A.weight",
		"model.layers.3.mlp.experts.17.up_proj.lora_A.default.weight",
	} {
		l, e, kind, ok := ParseExpertKey(key)
		if !ok || l != 3 || e != 17 || kind != (Kind{Up, A}) {
			t.Errorf("ParseExpertKey(%q) = %d %d %v %v", key, l, e, kind, ok)
		}
	}
	for _, key := range []string{
		"model.layers.3.mlp.shared_expert.up_proj.lora_A.weight",
		"model.layers.3.mlp.experts.17.up_proj.lora_C.weight",
		"model.layers.3.mlp.experts.x.up_proj.lora_A.weight",
		"x.model.layers.3.mlp.experts.1.up_proj.lora_A.weight",
		"model.layers.3.mlp.experts.1.up_proj.lora_A.default.bias",
	} {
		if _, _, _, ok := ParseExpertKey(key); ok {
			t.Errorf("ParseExpertKey(%q) accepted", key)
		}
	}
}

func FuzzParseFusedKey(f *testing.F) {
	for _, s := range []string{"layers.0.experts.gate_lora_a", "layers.12.experts.down_lora_b", "layers..experts.", "layers.1.experts.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		l, k, err := ParseFusedKey(key)
		if err != nil {
			return
		}
		if FusedKey(l, k) != key {
			t.Fatalf("accepted %q but it formats back as %q", key, FusedKey(l, k))
		}
	})
}

func FuzzParseExpertKey(f *testing.F) {
	f.Add("base_model.model.model.layers.0.mlp.experts.1.gate_proj.lora_B.default.weight")
	f.Add("model.layers.10.mlp.experts.255.down_proj.lora_A.weight")
	f.Fuzz(func(t *testing.T, key string) {
		l, e, k, ok := ParseExpertKey(key)
		if !ok {
			return
		}
		canon := ExpertKey(l, e, k)
		withDefault := strings.TrimSuffix(canon, ".weight") + ".default.weight"
		for _, p := range ExpertKeyPrefixes {
			if key == p+canon || key == p+withDefault {
				return
			}
		}
		t.Fatalf("accepted %q as layer %d expert %d %v", key, l, e, k)
	})
}
