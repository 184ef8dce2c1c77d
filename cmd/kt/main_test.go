package main

import (
	"bytes"
	"strings"
	"testing"
)

// runKT runs the kt command tree in-process with args and returns what it
// wrote to stdout and stderr.
func runKT(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	err = root.Execute()
	return o.String(), e.String(), err
}

// runCLI is runKT with stdout and stderr in one string, in the order written.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLIInput(t, "", args...)
}

// runCLIInput is runCLI with stdin reading from the given string.
func runCLIInput(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}
