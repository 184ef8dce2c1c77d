//go:build !(linux && amd64 && cgo)

package doctor

// perfChecks: the measurements need the CPU expert engine, which a build
// without cgo (or for another platform) does not have.
func perfChecks() []Check {
	return []Check{{"perf.read", func(env *Env) []Result {
		if !env.Measure {
			return nil
		}
		return []Result{{Section: "perf", Name: "perf.read", Status: Warn, Detail: "measurements need the CPU expert engine, which this build lacks",
			Hint: "rebuild kt with cgo (CGO_ENABLED=1, gcc) for linux/amd64"}}
	}}}
}
