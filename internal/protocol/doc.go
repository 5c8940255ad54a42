// Package protocol is the handover protocol by which the instances of one
// NRI plugin on a node agree, event by event, which of them acts: the
// handover directory (Dir), the ttrpc service (package api, client Dial)
// and the Coordinator that owns an instance's role. Package plugin drives
// it; the nri-handover command reads it. What authors and operators see of
// it is in the public package handover.
//
// # Parts
//
//   - The control plane (coordinator.go): roles (joining, standby, owner,
//     retired), claims made inside the runtime's Synchronize, Yield and
//     Watch over each instance's unix socket, the owner name and epochs in
//     the plugin's handover directory (dir.go), take-back and promotion
//     when an instance dies or hangs, and the policies (policy.go).
//   - The data plane (cut.go, cutconn.go): a 64-bit register in a page
//     every instance maps, changed by compare-and-swap, which decides for
//     every event which runtime connection acts. A connection keeps acting
//     until its heir has been seen in the runtime's chain.
//
// # Guarantees
//
// For a runtime that serializes events and calls each connected plugin at
// most once per event (containerd and CRI-O, through containerd/nri's
// adaptation), with or without BlockPluginSync around any event:
//
//   - every event is acted on by exactly one instance while the instances
//     live: across handovers, rollbacks and reconnections, including events
//     delivered between a newcomer's Synchronize and its append to the
//     chain;
//   - a newcomer whose Synchronize fails, hangs or is refused changes
//     nothing: the owner never stops acting;
//   - a stopping owner acts until its successor acts (up to the leave
//     timeout) and disconnects only when no request to it is in flight.
//
// # What is not guaranteed
//
//   - Events while no instance runs (the only instance was killed, or the
//     runtime restarted) are acted on by nobody; a container created then is
//     handed to the next owner's Synchronize as unprocessed (Stats.CaughtUp).
//   - An event the owner was inside of when it died is in doubt: acted on
//     at most once by default, at least once with plugin.WithAtLeastOnce;
//     it is logged and counted either way.
//   - A frozen owner (SIGSTOP) holds up each event for the runtime's request
//     timeout until the runtime drops it; events it was called for and did
//     not answer are lost to it, and the survivor acts from its promotion on.
//   - A runtime that calls only the newest connection of a name and index
//     (containerd/nri PR 281) and falls back to an older one when the newest
//     disconnects: events are missed until the older instance takes back.
//
// docs/design.md explains the protocol step by step; docs/model.md lists
// what the Promela models check.
package protocol
