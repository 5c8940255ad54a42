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
