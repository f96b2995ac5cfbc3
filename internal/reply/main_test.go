package reply

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// goroutine the handler and the transports start has an owner that stops it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
