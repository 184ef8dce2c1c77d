//go:build cgo

package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestLaunchArgumentCounts checks, without a GPU, that every launch of a
// named kernel in this package passes as many arguments as the kernel
// declares: a missing argument would otherwise show up only on the device,
// as a fault.
func TestLaunchArgumentCounts(t *testing.T) {
	ix, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	params := ix.params
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		t.Skip("package sources not beside the test binary")
	}
	checked := 0
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "launch" || len(call.Args) < 5 {
					return true
				}
				lit, ok := call.Args[1].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				if call.Ellipsis.IsValid() {
					// args... (a grouped launch builds its list): launch
					// checks the count at run time against the same table
					return true
				}
				name, _ := strconv.Unquote(lit.Value)
				want, ok := params[name]
				if !ok {
					if name != "no_such_kernel" {
						t.Errorf("%s: launch of unknown kernel %q", fset.Position(call.Pos()), name)
					}
					return true
				}
				if got := len(call.Args) - 5; got != want {
					t.Errorf("%s: %s launched with %d arguments, declared with %d", fset.Position(call.Pos()), name, got, want)
				}
				checked++
				return true
			})
		}
	}
	if checked < 20 {
		t.Fatalf("only %d launches checked", checked)
	}
	t.Logf("%d launches checked", checked)
}

// TestKernelCopyRefuses checks KernelCopy's argument checks (no GPU needed:
// they come before any launch).
func TestKernelCopyRefuses(t *testing.T) {
	d := &Device{}
	for _, c := range []struct {
		name string
		cs   []WordCopy
	}{
		{"not whole words", []WordCopy{{Dst: 8, Src: 16, N: 6}}},
		{"null source", []WordCopy{{Dst: 8, N: 4}}},
		{"negative", []WordCopy{{Dst: 8, Src: 16, N: -4}}},
		{"four copies", make([]WordCopy, 4)},
	} {
		if err := d.KernelCopy(nil, c.cs...); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := d.KernelCopy(nil, WordCopy{}); err != nil {
		t.Errorf("nothing to copy: %v", err)
	}
	// CopyHost checks its ranges as the stream copies do
	h, dev := &HostBuffer{Size: 8}, Buffer{Ptr: 16, Size: 64}
	for _, toHost := range []bool{false, true} {
		err := d.CopyHost(nil, toHost, HostCopy{Host: h, HostOff: 4, Dev: dev, N: 8})
		if err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("CopyHost past the pinned buffer (to host %v): %v", toHost, err)
		}
	}
}
