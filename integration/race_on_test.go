//go:build race

package integration

// raceEnabled: this test binary is built with -race, whose instrumentation
// makes the test's own Go code (decoding a stream's events) about 8 times
// slower; the volume tests scale down to keep CI's -race pass short.
const raceEnabled = true
