//go:build race

package jinja

import "time"

// overrunSlack is how far past its deadline a render may stop: one step of
// a hostile template, which the race detector slows several times.
const overrunSlack = 3 * time.Second
