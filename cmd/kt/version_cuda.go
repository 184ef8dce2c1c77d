//go:build cgo

package main

import (
	"fmt"
	"io"

	"github.com/ktserve/kt/backend/cuda"
)

func init() {
	versionExtras = append(versionExtras, func(w io.Writer) {
		for _, l := range cuda.VersionLines() {
			fmt.Fprintln(w, l)
		}
	})
}
