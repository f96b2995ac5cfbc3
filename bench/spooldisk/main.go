// Command spooldisk measures, on the disk holding -dir, what the spool's
// pattern of writes costs an fsync: groups of -group bytes appended and
// fsynced about a millisecond apart, a new file every -segment bytes, and
// the file before it deleted in one of several ways (-delete). It prints
// the fsync latencies, how many took over 4 and 8 ms, the process's CPU
// time per group (the deletions' included), and the time the deletions'
// system calls took. With -overwrite it instead writes the
// groups over a file already zero-filled and synced, with fdatasync (what
// a preallocated segment would cost).
//
// It is a measuring tool for BENCHMARKS.md, not part of inlet:
//
//	go run ./bench/spooldisk -dir /var/tmp/x -delete steps
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

func main() {
	dir := flag.String("dir", "", "a scratch directory on the disk to measure (created; emptied at the end)")
	group := flag.Int("group", 55000, "bytes per group commit")
	segment := flag.Int64("segment", 16<<20, "segment size")
	del := flag.String("delete", "steps", "how a segment before the active one is deleted: keep, unlink, steps")
	step := flag.Int64("step", 1<<20, "with -delete steps: bytes freed per truncation")
	gap := flag.Duration("gap", 5*time.Millisecond, "with -delete steps: the pause between truncations")
	overwrite := flag.Bool("overwrite", false, "write over a zero-filled, synced file with fdatasync; no segments")
	dur := flag.Duration("duration", 12*time.Second, "how long to write")
	flag.Parse()
	if *dir == "" {
		log.Fatal("spooldisk: -dir is required")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(*dir)
	var lat, dels []time.Duration
	var cpu time.Duration
	if *overwrite {
		lat, cpu = overwriting(*dir, *group, *dur)
	} else {
		lat, dels, cpu = segments(*dir, *group, *segment, *del, *step, *gap, *dur)
	}
	report(lat, dels, cpu)
}

// segments appends groups to segment files, as the spool does.
func segments(dir string, group int, segment int64, del string, step int64, gap, dur time.Duration) (lat, dels []time.Duration, cpu time.Duration) {
	d, err := os.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%08d.seg", i)) }
	create := func(i int) *os.File {
		f, err := os.OpenFile(name(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			log.Fatal(err)
		}
		return f
	}
	queue := make(chan string, 64)
	took := make(chan []time.Duration)
	go func() { // the deleter
		var t []time.Duration
		timed := func(f func() error) {
			start := time.Now()
			if err := f(); err != nil {
				log.Print(err)
			}
			t = append(t, time.Since(start))
		}
		for p := range queue {
			switch del {
			case "unlink":
				timed(func() error { return os.Remove(p) })
			case "steps":
				for size := segment - step; size >= 0; size -= step {
					timed(func() error { return os.Truncate(p, size) })
					time.Sleep(gap)
				}
				timed(func() error { return os.Remove(p) })
			}
		}
		took <- t
	}()
	buf := make([]byte, group)
	seg, size := 0, int64(0)
	f := create(seg)
	start := cputime()
	for end := time.Now().Add(dur); time.Now().Before(end); {
		if _, err := f.Write(buf); err != nil {
			log.Fatal(err)
		}
		size += int64(group)
		t := time.Now()
		if err := f.Sync(); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if size >= segment {
			f.Close()
			if seg > 0 && del != "keep" {
				queue <- name(seg - 1)
			}
			seg++
			f, size = create(seg), 0
		}
		time.Sleep(time.Millisecond)
	}
	cpu = cputime() - start
	f.Close()
	close(queue)
	return lat, <-took, cpu
}

// overwriting writes groups over a zero-filled, synced file, each followed
// by fdatasync.
func overwriting(dir string, group int, dur time.Duration) ([]time.Duration, time.Duration) {
	f, err := os.OpenFile(filepath.Join(dir, "prealloc"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	zeros := make([]byte, 1<<20)
	need := int64(dur/time.Millisecond)*int64(group) + 1
	for n := int64(0); n < need; n += int64(len(zeros)) {
		if _, err := f.Write(zeros); err != nil {
			log.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, group)
	var lat []time.Duration
	start := cputime()
	for end := time.Now().Add(dur); time.Now().Before(end); {
		if _, err := f.Write(buf); err != nil {
			log.Fatal(err)
		}
		t := time.Now()
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		time.Sleep(time.Millisecond)
	}
	return lat, cputime() - start
}

func cputime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(lat, dels []time.Duration, cpu time.Duration) {
	slices.Sort(lat)
	n := len(lat)
	var over4, over8 int
	var sum4 time.Duration
	for _, l := range lat {
		if l > 4*time.Millisecond {
			over4++
			sum4 += l
		}
		if l > 8*time.Millisecond {
			over8++
		}
	}
	q := func(p float64) time.Duration { return lat[min(n-1, int(float64(n)*p))] }
	fmt.Printf("fsyncs %d: p50 %v p99 %v p99.9 %v max %v; over 4 ms %d (%v in all), over 8 ms %d; process CPU per group %v\n",
		n, q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(0.999).Round(time.Microsecond),
		lat[n-1].Round(time.Microsecond), over4, sum4.Round(time.Millisecond), over8, (cpu / time.Duration(n)).Round(time.Microsecond))
	if len(dels) > 0 {
		var sum time.Duration
		for _, d := range dels {
			sum += d
		}
		slices.Sort(dels)
		fmt.Printf("deletion calls %d: %v in all, p50 %v, max %v\n", len(dels), sum.Round(time.Millisecond),
			dels[len(dels)/2].Round(time.Microsecond), dels[len(dels)-1].Round(time.Microsecond))
	}
}
