package testkit

import "go.uber.org/goleak"

// FasthttpGoroutines are the goroutines fasthttp leaves behind, for
// goleak.VerifyTestMain in packages whose tests serve on the fasthttp
// front (package fastfront): its worker pool's cleaner sees a stopped
// server only when its sleep ends, up to 10 s later, and the clock of its
// Date header runs for the life of the process once started.
func FasthttpGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	}
}
