package jinja

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCases renders testdata/cases.json and compares with Python Jinja2
// (testdata/gen/gen_cases.py): the same output, or an error where Python
// raised one.
func TestCases(t *testing.T) {
	var cases struct {
		Cases []struct {
			Name     string          `json:"name"`
			Template string          `json:"template"`
			Vars     json.RawMessage `json:"vars"`
		} `json:"cases"`
	}
	var golden struct {
		Cases []struct {
			Name   string  `json:"name"`
			Output *string `json:"output"`
			Error  *string `json:"error"`
		} `json:"cases"`
	}
	for name, v := range map[string]any{"cases.json": &cases, "golden_cases.json": &golden} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(cases.Cases) != len(golden.Cases) || len(cases.Cases) < 50 {
		t.Fatalf("%d cases, %d golden", len(cases.Cases), len(golden.Cases))
	}
	fixed := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i, c := range cases.Cases {
		g := golden.Cases[i]
		if g.Name != c.Name {
			t.Fatalf("case %d: %s vs %s", i, c.Name, g.Name)
		}
		got, err := render(c.Template, c.Vars, fixed)
		switch {
		case g.Error != nil:
			if err == nil {
				t.Errorf("%s: got %q, want an error like %q", c.Name, got, *g.Error)
			}
		case err != nil:
			t.Errorf("%s: %v", c.Name, err)
		case got != *g.Output:
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *g.Output)
		}
	}
}

func render(src string, varsJSON json.RawMessage, now time.Time) (string, error) {
	tm, err := Parse(src)
	if err != nil {
		return "", err
	}
	vars := map[string]Value{}
	if len(varsJSON) > 0 {
		v, err := FromJSON(varsJSON)
		if err != nil {
			return "", err
		}
		d := v.(*Dict)
		for _, k := range d.Keys() {
			vars[k.(string)], _ = d.Get(k)
		}
	}
	return tm.Render(context.Background(), vars, Options{Now: func() time.Time { return now }})
}
