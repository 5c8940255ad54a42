// Command e2e-sleep is the only program in the container image the e2e
// suite imports into containerd (no registry is reachable from the test
// machine): it serves as the pod sandbox ("pause") and as every test
// container. It sleeps until SIGTERM or SIGINT and then exits 0, so that
// StopContainer and StopPodSandbox return at once. As PID 1 of a PID
// namespace it must handle the signals itself: the kernel ignores signals
// without a handler there.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
