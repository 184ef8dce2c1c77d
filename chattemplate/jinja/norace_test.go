//go:build !race

package jinja

import "time"

// overrunSlack is how far past its deadline a render may stop: one step of
// a hostile template.
const overrunSlack = time.Second
