// Package failpoint is the fault tests' hook into the handover protocol: a
// variable that makes the process SIGKILL or SIGSTOP itself at a step. A
// binary obeys it only when built with the build tag "failpoints" (the
// process tests build their plugin binaries so); any other build ignores
// the variable, so a production binary cannot be made to kill itself.
package failpoint

// Env is the variable: "<step>:<action>" makes the instance kill itself
// (action "kill", SIGKILL) or stop itself ("stop", SIGSTOP) when the
// handover protocol reaches step (a protocol.Step, e.g. "yield-decided").
const Env = "NRI_HANDOVER_FAILPOINT"
