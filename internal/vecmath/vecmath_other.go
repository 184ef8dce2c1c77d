//go:build !cgo || !amd64

package vecmath

// level is 0: no C loops in this build.
func level() int { return 0 }

// Level names the loops in use ("go": this build has no C loops).
func Level() string { return "go" }

func levels() []int { return nil }

func maxAt(int, []float32) (float32, bool) { return 0, false }

func sumExpAt(int, []float32, float32, bool) (float64, bool) { return 0, false }

func scaleMaxAt(int, []float32, float32) (float32, bool) { return 0, false }

func expBlocksAt(int, []float32, float32, int, []float64) (float64, bool) { return 0, false }

func aboveAt(int, []float32, float32, []int32) ([]int32, bool) { return nil, false }
