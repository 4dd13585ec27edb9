// Command pause is the first process of every pod sandbox on the real test node.
//
// A sandbox's first process holds the pod's namespaces open and, as PID 1 of
// the pod's PID namespace when that is shared, must reap orphaned children,
// or they stay zombies for the pod's whole life. It exits cleanly on SIGINT or
// SIGTERM, which is how the container runtime stops a sandbox.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child: one SIGCHLD may stand for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
