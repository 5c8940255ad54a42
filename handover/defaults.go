package handover

import "time"

// Defaults of the plugin harness's options.
const (
	// DefaultClaimTimeout bounds a claim made inside the runtime's
	// Synchronize request. NRI's default request timeout is 2 s; a claim
	// must stay far below it so the runtime never drops the instance.
	DefaultClaimTimeout = 500 * time.Millisecond
	// DefaultLeaveTimeout bounds how long a leaving owner waits for a
	// standby to take over before it exits anyway.
	DefaultLeaveTimeout = 10 * time.Second
)

// DefaultRoot is the node-local directory under which every plugin gets its
// own handover directory.
const DefaultRoot = "/var/run/nri-handover"
