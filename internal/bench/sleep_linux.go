package bench

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// timerfd is a fine timer: a Linux timerfd read through the runtime's
// poller, which wakes as soon as the kernel's timer fires. The read also has
// a deadline at the same time, a runtime timer, which is the more punctual
// of the two when the process is busy.
type timerfd struct {
	fd   int
	f    *os.File
	conn syscall.RawConn
}

func newFineTimer() fineTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil // out of descriptors: the runtime timer alone
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &timerfd{fd: fd, f: f, conn: conn}
}

func (t *timerfd) sleepUntil(at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	// Setting the timer also clears an expiry not read before.
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	_ = t.f.SetReadDeadline(at)
	var buf [8]byte
	// Returns when the timer fired (the read succeeds) or at the deadline.
	_ = t.conn.Read(func(fd uintptr) bool {
		_, err := unix.Read(int(fd), buf[:])
		return err != unix.EAGAIN
	})
}

func (t *timerfd) close() { t.f.Close() }
