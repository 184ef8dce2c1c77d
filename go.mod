module github.com/ktserve/kt

go 1.26.0

require (
	github.com/spf13/cobra v1.10.2
	golang.org/x/sys v0.49.0
)

require golang.org/x/text v0.43.0

require github.com/spf13/pflag v1.0.9

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
