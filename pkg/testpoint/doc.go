// Package testpoint stops a process at a named point of an incident, once, for the
// end-to-end tests of leader changes: they freeze a leader at an exact step and resume it
// after a standby took over.
//
// The pause points are built only under the build tag kubefence_testpoints (BuildTag):
// the test harnesses that set Env (test/sim's BuildBinaries, BuildScenarioBinaries and
// planted builds) build the controller with `go build -tags kubefence_testpoints`. Without
// the tag, the release's build (make build, make images, make release), New and At do
// nothing and Env is ignored: no environment variable can make a released controller stop
// itself. The API is the same either way, so callers compile unchanged.
package testpoint
