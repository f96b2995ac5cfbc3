//go:build race

package event_test

// raceEnabled: the race detector makes sync.Pool drop what is put in it at
// random, so allocation counts are not the program's.
const raceEnabled = true
