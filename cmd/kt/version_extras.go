package main

import "io"

// versionExtras prints further `kt version` lines (the CUDA backend adds
// driver and library versions here from its own file's init).
var versionExtras []func(io.Writer)
