//go:build !race

package perplexity

// raceEnabled is true in a -race build, where the full held-out scoring
// of the trained model takes minutes.
const raceEnabled = false
