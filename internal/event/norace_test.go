//go:build !race

package event_test

const raceEnabled = false
