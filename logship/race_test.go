//go:build race

package logship_test

const raceEnabled = true
