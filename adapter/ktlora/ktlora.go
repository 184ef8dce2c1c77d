// Package ktlora names the tensors of KTransformers' fused expert LoRA
// (fused_expert_lora.safetensors, written by KT SFT) and of the per-expert
// PEFT keys the converter turns them into, and knows which dimension of each
// holds the expert count, the rank, the hidden size and the intermediate size.
package ktlora

import (
	"fmt"
	"strconv"
	"strings"
)

// FusedFile is the KT SFT file holding the fused expert LoRA tensors.
const FusedFile = "fused_expert_lora.safetensors"

// Proj is one of the three expert projections.
type Proj uint8

// The expert projections, in the order KT stores them.
const (
	Gate Proj = iota
	Up
	Down
)

// Projs lists the projections in KT order.
var Projs = [...]Proj{Gate, Up, Down}

// String returns the PEFT module name ("gate_proj", "up_proj", "down_proj").
func (p Proj) String() string {
	switch p {
	case Gate:
		return "gate_proj"
	case Up:
		return "up_proj"
	case Down:
		return "down_proj"
	}
	return "Proj(" + strconv.Itoa(int(p)) + ")"
}

// kt returns the KT short name ("gate", "up", "down").
func (p Proj) kt() string { return strings.TrimSuffix(p.String(), "_proj") }

// Factor is a LoRA factor: A (down-projection to rank r) or B (up from r).
type Factor uint8

// The two LoRA factors.
const (
	A Factor = iota
	B
)

// String returns "lora_A" or "lora_B".
func (f Factor) String() string {
	if f == A {
		return "lora_A"
	}
	return "lora_B"
}

// Kind identifies one of the six fused tensors of a layer.
type Kind struct {
	Proj   Proj
	Factor Factor
}

// Kinds lists the six fused tensors of a layer in KT order:
// gate A, gate B, up A, up B, down A, down B.
var Kinds = [6]Kind{{Gate, A}, {Gate, B}, {Up, A}, {Up, B}, {Down, A}, {Down, B}}

// KTName returns the KT tensor suffix ("gate_lora_a", ..., "down_lora_b").
func (k Kind) KTName() string {
	if k.Factor == A {
		return k.Proj.kt() + "_lora_a"
	}
	return k.Proj.kt() + "_lora_b"
}

// RankDim is the dimension of the 3-D fused tensor [E, ., .] holding the
// LoRA rank: 1 for A factors ([E, r, in]), 2 for B factors ([E, out, r]).
func (k Kind) RankDim() int {
	if k.Factor == A {
		return 1
	}
	return 2
}

// IsHidden reports whether the non-rank, non-expert dimension of this tensor is
// the hidden size (true) or the expert intermediate size (false): gate/up
// read the hidden state (A is [E, r, H]) and write the intermediate (B is
// [E, I, r]); down reads the intermediate (A is [E, r, I]) and writes the
// hidden state (B is [E, H, r]).
func (k Kind) IsHidden() bool {
	if k.Proj == Down {
		return k.Factor == B
	}
	return k.Factor == A
}

// FeatureDim is the dimension of the fused tensor that is not the expert
// or the rank dimension.
func (k Kind) FeatureDim() int { return 3 - k.RankDim() }

// Shape returns the fused shape of this kind for e experts, rank r, hidden h
// and intermediate i.
func (k Kind) Shape(e, r, h, i int64) []int64 {
	feat := i
	if k.IsHidden() {
		feat = h
	}
	if k.Factor == A {
		return []int64{e, r, feat}
	}
	return []int64{e, feat, r}
}

// ParseKTName maps a KT tensor suffix to its Kind.
func ParseKTName(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.KTName() == name {
			return k, true
		}
	}
	return Kind{}, false
}

// FusedKey returns the key of a fused tensor: "layers.{L}.experts.{kt name}".
func FusedKey(layer int, k Kind) string {
	return "layers." + strconv.Itoa(layer) + ".experts." + k.KTName()
}

// FusedKeyError says why a key is not a fused expert LoRA key.
type FusedKeyError struct {
	Key    string
	Reason string
}

func (e *FusedKeyError) Error() string { return fmt.Sprintf("%s: %s", e.Key, e.Reason) }

// ParseFusedKey splits a fused_expert_lora key "layers.{L}.experts.{name}".
// Keys that do not have this form, and names other than the six KT names,
// give a *FusedKeyError (the reference converter's "Unexpected key" and
// "Unsupported KT fused expert LoRA tensor").
func ParseFusedKey(key string) (layer int, kind Kind, err error) {
	rest, ok := strings.CutPrefix(key, "layers.")
	if !ok {
		return 0, Kind{}, &FusedKeyError{key, `want "layers.{L}.experts.{name}"`}
	}
	num, name, ok := strings.Cut(rest, ".experts.")
	if !ok || !allDigits(num) || name == "" || strings.Contains(name, ".") {
		return 0, Kind{}, &FusedKeyError{key, `want "layers.{L}.experts.{name}"`}
	}
	layer, convErr := strconv.Atoi(num)
	if convErr != nil || layer > 1<<20 {
		return 0, Kind{}, &FusedKeyError{key, "layer index out of range"}
	}
	kind, ok = ParseKTName(name)
	if !ok {
		return 0, Kind{}, &FusedKeyError{key, "unsupported KT fused expert LoRA tensor " + strconv.Quote(name) +
			" (want gate|up|down _lora_a|_lora_b)"}
	}
	return layer, kind, nil
}

// allDigits reports whether s is a canonical decimal number: ASCII digits
// with no leading zero (so that parsing and formatting round-trip).
func allDigits(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ExpertKey returns the PEFT key of one expert's LoRA factor as the converter
// writes it: "model.layers.{L}.mlp.experts.{e}.{proj}.{lora_A|lora_B}.weight".
func ExpertKey(layer, expert int, k Kind) string {
	return "model.layers." + strconv.Itoa(layer) + ".mlp.experts." + strconv.Itoa(expert) + "." +
		k.Proj.String() + "." + k.Factor.String() + ".weight"
}

// ExpertKeyPrefixes are the prefixes under which SGLang-KT looks up per-expert
// LoRA keys when it loads an expert adapter.
var ExpertKeyPrefixes = []string{"", "base_model.", "base_model.model.", "base_model.model.model."}

// ParseExpertKey parses a per-expert PEFT LoRA key
// "[prefix]model.layers.{L}.mlp.experts.{e}.{proj}.{lora_A|lora_B}[.default].weight"
// under any of ExpertKeyPrefixes. ok is false for any other key.
func ParseExpertKey(key string) (layer, expert int, kind Kind, ok bool) {
	for _, p := range ExpertKeyPrefixes {
		rest, found := strings.CutPrefix(key, p)
		if !found {
			continue
		}
		if layer, expert, kind, ok = parseExpertSuffix(rest); ok {
			return layer, expert, kind, true
		}
	}
	return 0, 0, Kind{}, false
}

func parseExpertSuffix(s string) (layer, expert int, kind Kind, ok bool) {
	parts := strings.Split(s, ".")
	// model layers L mlp experts e proj lora_X [default] weight
	if len(parts) == 10 && parts[8] == "default" {
		parts = append(parts[:8], parts[9])
	}
	if len(parts) != 9 || parts[0] != "model" || parts[1] != "layers" || parts[3] != "mlp" ||
		parts[4] != "experts" || parts[8] != "weight" || !allDigits(parts[2]) || !allDigits(parts[5]) {
		return 0, 0, Kind{}, false
	}
	var err1, err2 error
	layer, err1 = strconv.Atoi(parts[2])
	expert, err2 = strconv.Atoi(parts[5])
	if err1 != nil || err2 != nil {
		return 0, 0, Kind{}, false
	}
	for _, k := range Kinds {
		if k.Proj.String() == parts[6] && k.Factor.String() == parts[7] {
			return layer, expert, k, true
		}
	}
	return 0, 0, Kind{}, false
}
