//go:build race

package ivm_test

// raceEnabled: the race detector slows large copies tenfold, so size-bound tests shrink.
const raceEnabled = true
