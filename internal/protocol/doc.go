// Package protocol is the handover protocol by which the instances of one
// NRI plugin on a node agree, event by event, which of them acts: the
// handover directory (Dir), the ttrpc service (package api, client Dial)
// and the Coordinator that owns an instance's role. Package plugin drives
// it; the nri-handover command reads it. What authors and operators see of
// it is in the public package handover.
//
// # Parts
//
//   - The control plane: roles (joining, standby, owner, retired) and
//     an instance's life (coordinator.go, stages.go), claims made inside
//     the runtime's Synchronize (claim.go), the owner's answer to a Yield
//     (yield.go), the Watches over each instance's unix socket and the
//     take-back and promotion when an instance dies or hangs (watch.go),
//     the owner name and epochs in the plugin's handover directory
//     (dir.go), a leaving owner's yield to a successor whose new
//     connection the runtime holds back (queued.go), and the policies
//     (handover/policy.go).
//   - The data plane: a 64-bit register in a page every instance maps,
//     changed by compare-and-swap, which decides for every event which
//     runtime connection acts (cut.go); this instance's connections and
//     the decision at each event (cutconn.go); the control plane's moves
//     of the register (cutmove.go). A connection keeps acting until its
//     heir has been seen in the runtime's chain.
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
//     timeout) and disconnects only when no request to it is in flight;
//     if the runtime holds its successor's new connection back until the
//     owner exits (containerd issue 14083: the owner's own CRI stop), the
//     owner yields to the successor's connection in the chain at once and
//     disconnects once every request it has read is answered, without a
//     quiet connection: a request the runtime sends it meanwhile (only
//     containerd's task-exit StopContainer, or the event of a CRI call
//     begun before the successor registered) may fail with "closing
//     plugin", acted on by the successor all the same.
//
// # What is not guaranteed
//
//   - Events while no instance runs (the only instance was killed, or the
//     runtime restarted) are acted on by nobody; a container created then is
//     handed to the next owner's Synchronize as unprocessed (Stats.CaughtUp).
//   - An event the owner was inside of when it died is in doubt: acted on
//     at most once by default, at least once with plugin.WithAtLeastOnce;
//     it is logged and counted either way.
//   - An event the owner never ran a handler for (dropped or frozen between
//     events, or dropped right after an event was handed over to it) is not
//     in doubt: the instance that takes over, if the runtime called it for
//     that event, hands it to its author late, once (plugin.CatchingUp,
//     Stats.CaughtUpChanges) when it is a pod's run, an update or a Post*
//     event; any other such event is declared in doubt.
//   - A frozen or stuck owner (SIGSTOP, a handler that never returns)
//     holds up the event it was called for until the runtime's request
//     timeout; the runtime drops it, and a live standby or fallback takes
//     over at the next event it is called for (cut.go, rules 3 and 4), or
//     at the one after if the two have the same key: the event the owner
//     was inside of is declared in doubt (one it never read: above), and
//     the survivor catches up. Without a
//     live standby, events until the owner thaws and reconnects are lost.
//   - Rule 4 reads "the owner subscribes to this event and was not called
//     for it" as "the runtime dropped it". A plugin of another name with
//     the same index, called between the two instances, that fails the
//     request also keeps the owner from being called: the standby then
//     takes over needlessly (no event is acted on twice).
//   - Two events in a row with the same key (the same kind for the same
//     object, e.g. two identical UpdateContainer requests, or a 24-bit
//     hash collision) around a handover whose owner the runtime drops at
//     that moment: the second one is declared in doubt by the heir at its
//     next event, not acted on (cut.go, sighting). The same declaration
//     is a false alarm if the runtime reorders its calls between the two
//     events.
//   - A runtime that calls only the newest connection of a name and index
//     (containerd/nri PR 281): an older standby is not called while the
//     newest is connected, and is called (and takes over, rule 4) once it
//     is not; the event it disconnected in is in doubt.
//
// docs/design.md explains the protocol step by step; docs/model.md lists
// what the Promela models check.
package protocol
