// Package handover holds what a plugin author or operator sees of the
// handover between the instances of an NRI plugin on a node: who may take
// over (Policy, NewestInstance, NewestVersion, ParsePolicy), who an
// instance is and what it is doing (Instance, Role, Status, Handover, as
// plugin.Plugin's Instance, Role and Status return them), and the
// defaults of the harness's options (DefaultClaimTimeout,
// DefaultLeaveTimeout, DefaultRoot).
//
// The protocol itself (the handover directory, the ttrpc service and the
// coordinator that owns an instance's role) is internal to nri-handover:
// a plugin takes part in it through package plugin, an operator looks at
// it with the nri-handover command (status, probe).
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
//     handed to the next owner's Synchronize as unprocessed (Stats.CaughtUp),
//     and a start, stop or removal then of a pod or container an instance
//     had acted on is handed to the author's handler once, late
//     (plugin.CatchingUp, Stats.CaughtUpChanges); the events of an object
//     created and gone meanwhile stay unknown.
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
//     over at the next event it is called for (the per-event cut's rules 3 and 4, docs/design.md), or
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
//     next event, not acted on (docs/design.md, "A shared key"). The same declaration
//     is a false alarm if the runtime reorders its calls between the two
//     events.
//   - A runtime that calls only the newest connection of a name and index
//     (containerd/nri PR 281, work in progress; checked in the model only):
//     no event is acted on twice. A newcomer is called alone once appended;
//     its first event, if it has the key of the old owner's last one, is
//     declared in doubt. An older standby is not called while a newer
//     connection is, and is called again unnoticed once none is: it takes
//     over at its second call (rule 4), declaring the first in doubt. A
//     standby that registered after the owner is called instead of it: the
//     events it skips are marked and declared in doubt by whoever takes
//     over next. Lost without a declaration (docs/model.md C11): the events
//     that fall back to a retired instance's connection (declared only as
//     a gap by a later claim that finds the dropped owner gone).
//   - A runtime that calls a newcomer's connection before the old owner's
//     for an event with the same key as the owner's last one, while the
//     owner's leave timeout gives the events up between the two calls
//     (docs/model.md cut-x23): that event may be lost without a
//     declaration. containerd and CRI-O call connections of one index in
//     connection order (the older first) while a node has at most 12
//     plugins.
//   - Status and Ready (the roles) may show no owner, or two, for the
//     milliseconds of a take-back or until the superseded one's next event,
//     and after a take-back that stalled across a whole claim both
//     instances may report retired until the next claim (docs/model.md F8):
//     who acts on events does not depend on the roles, only on the
//     per-event cut.
//   - An instance whose handover page (owner.gen) has a layout this build
//     does not speak takes no part in the handover: it stays standby and
//     not Ready, says why, and acts on nothing; the instances that speak
//     the page go on serving.
//
// docs/design.md states them runtime by runtime; docs/model.md lists what
// the Promela models check.
//
// # Policies
//
// A custom policy is any type with Policy's two methods:
//
//	type sameMajor struct{}
//
//	func (sameMajor) Name() string { return "same-major" }
//
//	func (sameMajor) Allow(owner, taker handover.Instance) (bool, string) {
//		if major(taker.Version) != major(owner.Version) {
//			return false, "a new major version waits for an operator"
//		}
//		return handover.NewestInstance{}.Allow(owner, taker)
//	}
//
// passed with plugin.WithPolicy(sameMajor{}).
package handover
