//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nri-handover/nri-handover/internal/protocol"
)

// Enabled reports whether this build obeys Env.
const Enabled = true

// FromEnv returns the failpoint Env asks for, nil if it is not set, or an
// error for a malformed value.
func FromEnv() (func(protocol.Step), error) {
	v := os.Getenv(Env)
	if v == "" {
		return nil, nil
	}
	step, action, ok := strings.Cut(v, ":")
	var sig syscall.Signal
	switch action {
	case "kill":
		sig = syscall.SIGKILL
	case "stop":
		sig = syscall.SIGSTOP
	default:
		ok = false
	}
	if !ok {
		return nil, fmt.Errorf("$%s=%q: want <step>:kill or <step>:stop", Env, v)
	}
	return func(s protocol.Step) {
		if string(s) != step {
			return
		}
		if sig == syscall.SIGKILL {
			_ = syscall.Kill(os.Getpid(), sig)
			return
		}
		// The kernel stops the other threads asynchronously and this one
		// could run on for a moment: wait for the SIGCONT that only comes
		// once the process was continued, so the stop is exactly here.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		_ = syscall.Kill(os.Getpid(), sig)
		<-cont
	}, nil
}
