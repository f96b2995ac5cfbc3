//go:build !linux

package bench

func newFineTimer() fineTimer { return nil }
