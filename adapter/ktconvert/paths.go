package ktconvert

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// resolvePath makes p absolute, expands a leading "~", and resolves symbolic
// links in its longest existing prefix, like Python's
// Path(p).expanduser().resolve() does.
func resolvePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("expand %q: %w", p, err)
		}
		p = filepath.Join(home, p[1:])
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	// Walk up to the deepest existing ancestor, resolve it, re-append the rest.
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	return filepath.Join(real, rest), nil
}

// within reports whether path is dir itself or lies below it; both must be
// clean absolute paths.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)))
}

// output is one directory the converter writes.
type output struct {
	role string // "output", "expert output", "non-expert output"
	flag string // the argument that named it, for messages
	path string // resolved
}

// MarkerFile is the file kt convert-adapter writes into every output
// directory. Replacing a non-empty directory (--overwrite) is allowed only
// when it holds this marker, so that a mistyped OUT can never delete a
// directory kt did not write.
const MarkerFile = ".kt-convert-adapter"

// markerText is MarkerFile's content.
const markerText = "written by kt convert-adapter; kt convert-adapter --overwrite may replace this directory\n"

// protected is a directory no output may be or contain.
type protected struct {
	what string // "working directory", "base model directory"
	path string // resolved
}

// checkOutputs applies the reference converter's refusals to the output
// directories, plus the checks that keep a replace from destroying anything
// else: every output differs from, is not inside, and does not contain the
// input or another output; no output is or contains a guarded directory
// (the working directory, a local base model); an existing output is a
// directory, empty, or (with overwrite) one kt wrote, holding MarkerFile.
func checkOutputs(in string, outs []output, guarded []protected, overwrite bool) error {
	for i, o := range outs {
		for _, g := range guarded {
			switch {
			case o.path == g.path:
				return fmt.Errorf("%s %s: is the %s; refusing to write there", o.role, o.path, g.what)
			case within(g.path, o.path):
				return fmt.Errorf("%s %s: contains the %s %s; refusing to write there", o.role, o.path, g.what, g.path)
			}
		}
		switch {
		case o.path == in:
			return fmt.Errorf("%s %s: must be different from the input directory", o.role, o.path)
		case within(o.path, in):
			return fmt.Errorf("%s %s: is inside the input directory %s", o.role, o.path, in)
		case within(in, o.path):
			return fmt.Errorf("%s %s: contains the input directory %s", o.role, o.path, in)
		}
		for _, p := range outs[:i] {
			switch {
			case o.path == p.path:
				return fmt.Errorf("%s %s: same directory as the %s; merged, expert and non-expert output directories must be distinct", o.role, o.path, p.role)
			case within(o.path, p.path):
				return fmt.Errorf("%s %s: is inside the %s %s", o.role, o.path, p.role, p.path)
			case within(p.path, o.path):
				return fmt.Errorf("%s %s: contains the %s %s", o.role, o.path, p.role, p.path)
			}
		}
		fi, err := os.Stat(o.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("%s %s: %w", o.role, o.path, err)
		case !fi.IsDir():
			return fmt.Errorf("%s %s: exists and is not a directory", o.role, o.path)
		}
		empty, err := dirEmpty(o.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.role, o.path, err)
		}
		if empty {
			continue
		}
		marked, err := hasMarker(o.path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.role, o.path, err)
		}
		switch {
		case !marked:
			return fmt.Errorf("%s %s: directory is not empty and has no %s marker, so kt convert-adapter did not write it; refusing to replace it (--overwrite replaces only kt convert-adapter's own outputs: remove it yourself or choose another directory)", o.role, o.path, MarkerFile)
		case !overwrite:
			return fmt.Errorf("%s %s: directory is not empty (pass --overwrite to replace it)", o.role, o.path)
		}
	}
	return nil
}

func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// hasMarker reports whether dir holds MarkerFile as a regular file.
func hasMarker(dir string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(dir, MarkerFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

// guardedDirs returns the directories no output may be or contain: the
// working directory and, when baseModel names a local directory, the base
// model's.
func guardedDirs(baseModel string) ([]protected, error) {
	cwd, err := resolvePath(".")
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	g := []protected{{what: "working directory", path: cwd}}
	if bm, err := resolvePath(baseModel); err == nil {
		if fi, err := os.Stat(bm); err == nil && fi.IsDir() {
			g = append(g, protected{what: "base model directory", path: bm})
		}
	}
	return g, nil
}
