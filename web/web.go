// Package web holds inlet's browser assets, embedded in the binary:
// dist/inlet.js, the tracker built from sdk/ by npm (committed, checked
// against its source by web/test/build.test.mjs), ui/, the live events
// page, and example/, a small shop that uses inlet.js. internal/webui
// serves them.
package web

import "embed"

// FS is the assets: dist/inlet.js, dist/inlet.d.ts, ui/ and example/.
//
//go:embed dist/inlet.js dist/inlet.d.ts ui example
var FS embed.FS
